// SPDX-License-Identifier: MIT
/*
 * k3ops lab: the stand-in for AMD's amdgpu.ko (the amdgpu-dkms build) on a lab VM host, which has no GPU.
 * Built by the real dkms from the lab's amdgpu-dkms package, loaded by the real kernel: its version in
 * /sys/module/amdgpu/version and its load line in the kernel log. Its device nodes are made from userspace.
 */
#include <linux/module.h>

#include "k3lab-build.h"

static int __init amdgpu_init(void)
{
	pr_info("[drm] amdgpu kernel modesetting enabled.\n");
	pr_info("amdgpu: k3ops lab stand-in, version %s\n", K3LAB_VERSION);
	return 0;
}

static void __exit amdgpu_exit(void)
{
}

module_init(amdgpu_init);
module_exit(amdgpu_exit);
MODULE_VERSION(K3LAB_VERSION);
MODULE_DESCRIPTION("k3ops lab stand-in for the AMD GPU driver");
MODULE_LICENSE("GPL and additional rights");
