/* Readers of the replies that describe a deployment (topo_parse.c): the
 * cluster's slot map (CLUSTER SHARDS, CLUSTER SLOTS), redirects (MOVED,
 * ASK), and what sentinels and ROLE say. Pure functions over hiredis
 * replies: no state, no I/O, never trusting the peer (a malformed reply is
 * refused with a sentence, never read out of bounds). Internal to the net
 * layer. */
#ifndef RLOCK_TOPO_H
#define RLOCK_TOPO_H

#include <hiredis.h>
#include <stddef.h>

#define RLOCK__HOST_MAX 256 /* host names and addresses, NUL included */
#define RLOCK__SLOTS 16384

/* One range of slots served by one master. */
typedef struct rlock__slot_range {
  int start, end;              /* inclusive, 0..16383, start <= end */
  char host[RLOCK__HOST_MAX];  /* the master's address */
  int port;                    /* 1..65535 */
  int replicas;                /* replicas listed for it (healthy or not) */
  int replicas_online;         /* of those, the ones not "failed" */
} rlock__slot_range;

/* Reads a CLUSTER SLOTS reply (RESP2: an array of [start, end, [host,
 * port, id, ...], replica...]) or a CLUSTER SHARDS reply (an array of maps
 * as flat arrays: "slots" [start, end, start, end ...], "nodes" [[key,
 * value ...] ...] where the master is the node whose "role" is "master";
 * its address is "endpoint", else "ip", and its port "port", else
 * "tls-port" - with tls != 0, "tls-port" first; a "failed" master is passed
 * over for another one when a shard lists two). A master address that is
 * nil, empty or "?" (the node does not know its own) is replaced by
 * `fallback_host` (the node that was asked; NULL: such a reply is refused).
 * Shards without slots are skipped; a shard with several ranges gives one
 * entry per range. Returns the number of ranges
 * (malloc'd array in *out, to free) or -1 with a sentence in err
 * (malformed: wrong types, slots out of range, no master, a port out of
 * range, more than 16384 ranges). 0 ranges is valid (*out NULL). */
int rlock__parse_cluster_slots(const redisReply *r, const char *fallback_host,
                               rlock__slot_range **out, char *err,
                               size_t errlen);
int rlock__parse_cluster_shards(const redisReply *r, int tls,
                                const char *fallback_host,
                                rlock__slot_range **out, char *err,
                                size_t errlen);

/* An error reply's text "MOVED <slot> <host>:<port>" or "ASK <slot>
 * <host>:<port>" (host may be an IPv6 address, split at the last ':'; an
 * empty host means "the node that answered", left as "" here). Returns 1
 * for MOVED, 2 for ASK (slot, host, port filled), 0 for any other text or
 * a malformed one. */
int rlock__parse_redirect(const char *text, size_t len, int *slot,
                          char *host, size_t hostlen, int *port);

/* SENTINEL GET-MASTER-ADDR-BY-NAME's reply: [host, port] (the port a
 * string, as sentinels send it, or an integer). Returns 1 (host,
 * port filled), 0 for a nil reply or an empty array (the sentinel knows no
 * such master), -1 when malformed (err filled). */
int rlock__parse_master_addr(const redisReply *r, char *host, size_t hostlen,
                             int *port, char *err, size_t errlen);

/* A "+switch-master" message payload: "<name> <old-ip> <old-port>
 * <new-ip> <new-port>". Returns 1 when it is about master `name` (host and
 * port: the new master), 0 when about another master, -1 when malformed. */
int rlock__parse_switch_master(const char *payload, size_t len,
                               const char *name, char *host, size_t hostlen,
                               int *port);

/* SENTINEL REPLICAS <master>'s reply: one entry per replica the sentinel
 * knows (a flat [key, value ...] array each in RESP2). Counts the
 * replicas the sentinel has heard from as such, whatever their flags
 * (s_down, disconnected: such a replica may come back with old data and be
 * promoted); an entry whose "runid" is empty is one the sentinel has never
 * reached since it listed it - a failed master it turned into a replica
 * entry, which must sync from the new master before it serves - and is not
 * counted. Returns the count, or -1 when malformed (err filled). */
int rlock__parse_sentinel_replicas(const redisReply *r, char *err,
                                   size_t errlen);

/* A ROLE reply. Returns 1 for a master (*replicas: the replicas it lists,
 * NULL ok), 0 for a replica or a sentinel, -1 when malformed. */
int rlock__parse_role(const redisReply *r, int *replicas);

#endif
