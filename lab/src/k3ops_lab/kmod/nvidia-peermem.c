// SPDX-License-Identifier: MIT
/*
 * k3ops lab: the stand-in for nvidia-peermem.ko (GPUDirect RDMA), built with nvidia.ko from the same
 * DKMS source. Like the real one it needs nvidia.ko's P2P symbols, so modprobe loads nvidia first, and
 * no device loads it: modules-load.d or a modprobe does.
 */
#include <linux/module.h>

#include "k3lab-build.h"

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address, u64 length, void **page_table,
			 void (*free_callback)(void *data), void *data);

static int __init peermem_init(void)
{
	/* A call into nvidia's symbol, so that the module depends on nvidia.ko (modpost, depmod); the stand-in
	 * answers every request for pages as the real driver answers a bad token. */
	if (nvidia_p2p_get_pages(0, 0, 0, 0, NULL, NULL, NULL) != -EINVAL)
		return -ENODEV;
	pr_info("nvidia_peermem: k3ops lab stand-in for GPUDirect RDMA, driver %s\n", K3LAB_VERSION);
	return 0;
}

static void __exit peermem_exit(void)
{
}

module_init(peermem_init);
module_exit(peermem_exit);
MODULE_VERSION(K3LAB_VERSION);
MODULE_DESCRIPTION("k3ops lab stand-in for NVIDIA GPUDirect RDMA peer memory");
MODULE_LICENSE("Dual BSD/GPL");
