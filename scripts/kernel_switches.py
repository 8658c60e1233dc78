"""The probes' kernel settings: a setting is a space-separated list of NAME=VALUE environment
assignments (e.g. "JBS_CONV_STRIP=0 JBS_CONV_HALO_SS=0"; "" is the default dispatch)."""

import os


def apply_setting(setting: str, switches) -> None:
    """Clears every variable in `switches`, then sets the ones `setting` names, so that one
    setting's switches do not leak into the next."""
    for name in switches:
        os.environ.pop(name, None)
    for assignment in setting.split():
        name, value = assignment.split("=")
        os.environ[name] = value
