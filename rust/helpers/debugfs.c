// SPDX-License-Identifier: GPL-2.0
/*
 * debugfs helpers for cmecho's Rust layer (rust/rdma/debugfs.rs).
 *
 * A file here shows text that Rust writes into its seq_file. Its
 * file_operations have this module as owner: an open file pins the module, so
 * no close can run the module's code after rmmod (the kernel's Rust debugfs
 * files have no owner). debugfs's proxy keeps show() from running once
 * debugfs_remove() of the file has returned.
 */
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/seq_file.h>

#include "cmecho_helpers.h"

static int cmecho_debugfs_show(struct seq_file *m, void *unused)
{
	return cmecho_rs_debugfs_show(m->private, m);
}

static int cmecho_debugfs_open(struct inode *inode, struct file *file)
{
	return single_open(file, cmecho_debugfs_show, inode->i_private);
}

static const struct file_operations cmecho_debugfs_fops = {
	.owner = THIS_MODULE,
	.open = cmecho_debugfs_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
};

/*
 * debugfs_create_dir() and debugfs_remove() are static inlines without
 * CONFIG_DEBUG_FS, where cmecho still builds and runs without its files.
 */

/* A directory, or an error pointer; @parent NULL is debugfs's root. */
struct dentry *cmecho_debugfs_dir(const char *name, struct dentry *parent)
{
	return debugfs_create_dir(name, parent);
}

/* A file only root reads (0400), whose show() hands @ctx to cmecho_rs_debugfs_show(). */
struct dentry *cmecho_debugfs_file(const char *name, struct dentry *parent, void *ctx)
{
	return debugfs_create_file(name, 0400, parent, ctx, &cmecho_debugfs_fops);
}

/* Removes a directory with everything in it, or a file; waits for a show(). */
void cmecho_debugfs_remove(struct dentry *dentry)
{
	debugfs_remove(dentry);
}
