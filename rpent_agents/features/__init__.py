"""Feature models: a VLA seen as prefix tokens + reference chunk, and the RL token on top.

`load_featurizer()` returns the embedded default (built-in VLA + RL token); see
`protocol.FeatureModel` for what any VLA must offer, `pi05` for pi0.5 through LeRobot and
`remote` for a feature server reached over a websocket.
"""

from rpent_agents.features.checkpoint import DEFAULT_CHECKPOINT_DIR, load_featurizer
from rpent_agents.features.protocol import FeatureModel, PrefixFeatures, RLTFeaturizer

__all__ = [
    "DEFAULT_CHECKPOINT_DIR",
    "FeatureModel",
    "PrefixFeatures",
    "RLTFeaturizer",
    "load_featurizer",
]
