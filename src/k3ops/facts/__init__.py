"""pyinfra facts about GPU hosts: drivers, GPUs, boot settings and packages."""
