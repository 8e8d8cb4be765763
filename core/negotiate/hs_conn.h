/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The handshakes' side of a connection's life: what conn/, which sits below
 * negotiate/, calls up into when the program stages data, closes or exits while a
 * handshake runs, and when an upgraded connection closes (struct conn_negotiate_ops,
 * conn.h).
 */
#ifndef SMC_HS_CONN_H
#define SMC_HS_CONN_H

/* Installs them (conn_negotiate_ops_set): once, from the library's constructor, before
 * any connection exists. */
void hs_conn_ops_install(void);

#endif
