"""The runbooks `k3ops doctor` names: a package so that an installed k3ops carries them."""
