/* SPDX-License-Identifier: GPL-2.0 */
#ifndef CMECHO_MISUSE_H
#define CMECHO_MISUSE_H

const char *misuse_addr(void);

#endif /* CMECHO_MISUSE_H */
