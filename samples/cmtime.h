/* SPDX-License-Identifier: GPL-2.0 */
#ifndef CMECHO_CMTIME_H
#define CMECHO_CMTIME_H

const char *cmtime_addr(void);

#endif /* CMECHO_CMTIME_H */
