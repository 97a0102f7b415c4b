"""Model and hardware profiles: packaged TOML data, a loader and a config.json import."""

from .errors import ProfileError
from .hf_import import model_from_hf_config
from .loader import hardware_names, load_hardware, load_model, model_names
from .params import ParamCount, count_params
from .schema import HardwareProfile, ModelProfile

__all__ = [
    "HardwareProfile",
    "ModelProfile",
    "ParamCount",
    "ProfileError",
    "count_params",
    "hardware_names",
    "load_hardware",
    "load_model",
    "model_from_hf_config",
    "model_names",
]
