"""What k3ops runs on the GPU hosts themselves: the checkpoint store and the engine watchdog.

The deploys copy this package to every host (as `k3ops_onhost`, see `layout`); systemd units run it
there. Standard library only, except the checkpoint store's Hub client (huggingface_hub, in its own
venv); it imports nothing else from k3ops (relative imports only).
"""
