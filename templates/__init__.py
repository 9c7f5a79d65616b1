"""Every file a deploy writes onto a host (jinja2): a package so that an installed k3ops carries them."""
