"""Engine-agnostic pipeline policies: layouts, chunk sizing, admission, modes."""
