/* Thread and owner ids (core.h): one process-wide counter, so an owner
 * string can never name two threads - or a thread and an owner id from
 * rlock_owner_new() - over the process's life. */
#include "core.h"

/* Ids start at 1 and are never reused. */
static atomic_uint_fast64_t next_id = 1;
static _Thread_local uint64_t this_thread_id;

uint64_t rlock__id_next(void) {
  return (uint64_t)atomic_fetch_add(&next_id, 1);
}

uint64_t rlock__thread_id(void) {
  if (this_thread_id == 0)
    this_thread_id = rlock__id_next();
  return this_thread_id;
}
