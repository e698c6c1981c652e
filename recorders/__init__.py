"""RPent package."""
