"""Engine-agnostic pipeline policies: layouts and program order, chunk sizing, delay scheduling, modes."""
