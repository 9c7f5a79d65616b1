"""Inference engines: the launch recipes for K3 and the command lines rendered from them."""
