"""Feature models: a VLA seen as prefix tokens + reference chunk, and the RL token on top.

`load_featurizer()` returns the embedded default (built-in VLA + RL token); see
`protocol.FeatureModel` for what any VLA must offer, `rl_token` for the RL token that
compresses a VLA's prefix into `z_rl`, `builtin` for the built-in VLA, `pi05` for pi0.5
through LeRobot (`pi05_options` for its speed options), `remote` for a feature server reached
over a websocket and `checkpoint` for the saved form of a feature model.
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
