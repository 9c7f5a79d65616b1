// SPDX-License-Identifier: MIT
/*
 * k3ops lab: the stand-in for NVIDIA's nvidia.ko on a lab VM host, which has no GPU. The lab's
 * nvidia-kernel-*-dkms packages ship this source; the real dkms builds it against the VM's kernel
 * headers and the real kernel loads it. It shows what the kernel shows of the driver: its version
 * (/sys/module/nvidia/version, /proc/driver/nvidia/version), its parameters (/proc/driver/nvidia/params),
 * its character device major (195), its load line in the kernel log, and the taint of its licence.
 * Its device nodes are made from userspace, as nvidia-modprobe makes the real ones.
 *
 * The lab's knob: a line written to /proc/driver/nvidia/k3ops-lab-log is logged by the kernel as the
 * driver's NVRM line (an Xid for the doctor's drills).
 */
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "k3lab-build.h" /* K3LAB_VERSION, K3LAB_OPEN: written by the lab's package */

#define NV_MAJOR 195
#define NV_LOG_LINE 512

#if K3LAB_OPEN
#define NV_BANNER "NVIDIA UNIX Open Kernel Module for x86_64  " K3LAB_VERSION "  Release Build  (k3ops-lab@dkms)"
#else
#define NV_BANNER "NVIDIA UNIX x86_64 Kernel Module  " K3LAB_VERSION "  Release Build  (k3ops-lab@dkms)"
#endif

/* Two of the NVreg_ parameters, so that modprobe.d options show in /proc/driver/nvidia/params. */
static int NVreg_EnableStreamMemOPs;
module_param(NVreg_EnableStreamMemOPs, int, 0444);
static char *NVreg_RegistryDwords = "";
module_param(NVreg_RegistryDwords, charp, 0444);

static struct proc_dir_entry *nv_proc;

static int nv_version_show(struct seq_file *m, void *v)
{
	seq_printf(m, "NVRM version: %s\nGCC version:  gcc version %s\n", NV_BANNER, __VERSION__);
	return 0;
}

static int nv_params_show(struct seq_file *m, void *v)
{
	seq_printf(m, "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"
		      "DeviceFileGID: 0\nDeviceFileMode: 438\nEnableStreamMemOPs: %d\nEnableGpuFirmware: %d\n"
		      "RegistryDwords: \"%s\"\n",
		   NVreg_EnableStreamMemOPs, K3LAB_OPEN ? 18 : 0, NVreg_RegistryDwords);
	return 0;
}

static ssize_t nv_log_write(struct file *file, const char __user *from, size_t count, loff_t *pos)
{
	char line[NV_LOG_LINE];
	size_t length = min(count, sizeof(line) - 1);

	if (copy_from_user(line, from, length))
		return -EFAULT;
	line[length] = '\0';
	pr_warn("NVRM: %s\n", strim(line));
	return count;
}

static const struct proc_ops nv_log_ops = { .proc_write = nv_log_write };

static int nv_open(struct inode *inode, struct file *file)
{
	return 0;
}

static const struct file_operations nv_fops = { .owner = THIS_MODULE, .open = nv_open };

/* The P2P interface nvidia-peermem links against, as it links against the real driver's. */
int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address, u64 length, void **page_table,
			 void (*free_callback)(void *data), void *data)
{
	return -EINVAL;
}
EXPORT_SYMBOL(nvidia_p2p_get_pages);

static int __init nv_init(void)
{
	int status = register_chrdev(NV_MAJOR, "nvidia", &nv_fops);

	if (status < 0)
		return status;
	nv_proc = proc_mkdir("driver/nvidia", NULL);
	if (!nv_proc) {
		unregister_chrdev(NV_MAJOR, "nvidia");
		return -ENOMEM;
	}
	proc_create_single("version", 0444, nv_proc, nv_version_show);
	proc_create_single("params", 0444, nv_proc, nv_params_show);
	proc_create("k3ops-lab-log", 0200, nv_proc, &nv_log_ops);
	pr_info("NVRM: loading %s\n", NV_BANNER);
	return 0;
}

static void __exit nv_exit(void)
{
	proc_remove(nv_proc);
	unregister_chrdev(NV_MAJOR, "nvidia");
}

module_init(nv_init);
module_exit(nv_exit);
MODULE_VERSION(K3LAB_VERSION);
MODULE_DESCRIPTION("k3ops lab stand-in for the NVIDIA kernel module");
/* As the real ones: the open modules are GPL-compatible, the proprietary one taints the kernel (P). */
#if K3LAB_OPEN
MODULE_LICENSE("Dual MIT/GPL");
#else
MODULE_LICENSE("NVIDIA");
#endif
