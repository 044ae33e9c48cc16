/* hello: the rlock C API in twenty lines. Usage: hello [REDIS-URI] */
#include <rlock.h>
#include <stdio.h>

int main(int argc, char **argv) {
  rlock_options opts;
  rlock_options_init(&opts);
  opts.uri = argc > 1 ? argv[1] : NULL; /* NULL: $REDIS_URL, else localhost */
  rlock_client *client;
  rlock *lock = NULL;
  int rc = rlock_client_new(&client, &opts);
  if (rc == 0)
    rc = rlock_new(client, "hello", &lock);   /* Redisson: getLock("hello") */
  if (rc == 0)
    rc = rlock_try_lock(lock, 5000, -1);      /* wait <= 5 s, watchdog lease */
  if (rc == 1) {
    printf("hello: holding the lock as %s:%llu\n", rlock_client_id(client),
           (unsigned long long)rlock_thread_id());
    rc = rlock_unlock(lock);                  /* 1: released, waiter woken */
  } else if (rc == 0) {
    printf("hello: the lock is busy\n");
  }
  if (rc < 0)
    fprintf(stderr, "hello: %s: %s\n", rlock_err_name(rc), rlock_last_error());
  rlock_free(lock);
  rlock_client_free(client);
  return rc < 0;
}
