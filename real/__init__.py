"""TensorFlow backend (run-real)."""
