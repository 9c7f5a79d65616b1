"""pyinfra operations for GPU hosts that pyinfra does not ship."""
