/* A free loopback port for a test server, shared by the test harnesses
 * (tests/redis/harness.c, tests/topo/topo_harness.c). Header-only: the two
 * harness libraries are built apart. */
#ifndef RT_FREE_PORT_H
#define RT_FREE_PORT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static inline int rt_pick_free_port(void) {
  /* A port below the kernel's ephemeral range (ip_local_port_range, 32768
   * and up by default): a port from that range (bind to port 0) can be
   * taken between this check and the server's bind by the local end of
   * any outgoing connection - the tests make thousands - so a server
   * sometimes failed to start. Random, checked with a bind; the callers
   * retry when the server still loses a race for it. */
  static _Thread_local unsigned seed;
  if (seed == 0)
    seed = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL) ^
           (unsigned)(uintptr_t)&seed;
  for (int attempt = 0; attempt < 200; attempt++) {
    seed = seed * 1103515245u + 12345u;
    int port = 12000 + (int)((seed >> 8) % 20000u); /* 12000..31999 */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (ok)
      return port;
  }
  return -1;
}

#endif
