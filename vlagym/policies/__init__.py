"""Policies: the VLA (config dataclass + nn.Module) and its checkpoint format."""

from vlagym.policies.checkpoint import read_checkpoint_config, save_checkpoint
from vlagym.policies.config import VLAConfig
from vlagym.policies.vla import VLAPolicy, load_policy

__all__ = ["VLAConfig", "VLAPolicy", "load_policy", "read_checkpoint_config", "save_checkpoint"]
