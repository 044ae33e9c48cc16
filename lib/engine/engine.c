/* The engine's life: set up at open, told when the command connection is
 * up, closed in two halves (finish what runs and send the last repairs;
 * then free). */
#include <string.h>

#include "engine.h"

int rlock__engine_init(rlock__engine *e, rlock__core *core, rlock__net *net,
                       const char *client_id) {
  memset(e, 0, sizeof(*e));
  e->core = core;
  e->net = net;
  e->client_id = client_id;
  rlock__map_init(&e->holds);
  rlock__map_init(&e->suspects);
  rlock__map_init(&e->gates);
  rlock__parker_init(&e->parker, core->opts.spin_us);
  return rlock__random_bytes(e->latch_seed, sizeof(e->latch_seed));
}

/* The period: repairs still pending are tried again, and what is held is
 * renewed. */
static void tick(rlock__timed *t) {
  rlock__engine *e = RLOCK__CONTAINER_OF(t, rlock__engine, tick);
  rlock__timed_start(e->core, &e->tick,
                     rlock__now_ms() + e->core->opts.watchdog_timeout_ms / 3);
  rlock__suspects_run(e);
  rlock__holds_check_risk(e);
  rlock__holds_renew(e);
}

void rlock__engine_start(rlock__engine *e) {
  e->tick.fire = tick;
  rlock__timed_start(e->core, &e->tick,
                     rlock__now_ms() + e->core->opts.watchdog_timeout_ms / 3);
}

void rlock__engine_on_cmd_ready(rlock__engine *e) {
  rlock__suspects_run(e);
  rlock__gates_reconnected(e);
}

int rlock__engine_close(rlock__engine *e) {
  while (e->active_head != NULL) {
    rlock__op *op = e->active_head;
    /* An acquire whose command is on its way may still take the lock on
     * the server: trim it back before the connection goes. */
    if (op->type->acquires && op->cmd != NULL)
      rlock__suspect_add(e, op->lock, op->owner);
    rlock__op_finish(op, RLOCK_ECLOSED);
  }
  rlock__timed_stop(e->core, &e->tick);
  rlock__timed_stop(e->core, &e->latch_timer);
  if (!rlock__net_cmd_connected(e->net))
    return 0;
  e->draining = rlock__suspects_flush(e) + rlock__latches_flush_at_close(e) +
                e->abandons_inflight;
  return e->draining;
}

void rlock__engine_free(rlock__engine *e) {
  rlock__holds_free(e);
  rlock__gates_free(e);
  rlock__suspects_free(e);
  rlock__latches_free(e);
}
