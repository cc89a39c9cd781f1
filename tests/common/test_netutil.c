/* Tests common/netutil.c's loopback check: whole loopback addresses pass, names that only
 * start like one do not. */
#include <stdio.h>

#include "common/netutil.h"
#include "tests/test.h"

int main(void)
{
    static const char *const yes[] = {"127.0.0.1:50051", "127.9.8.7:1", "localhost:8080",
                                      "LOCALHOST:1",     "[::1]:80",    "unix:/tmp/zt.sock"};
    static const char *const no[] = {"127.attacker.example:50051",
                                     "127.0.0.1.example:80",
                                     "127.0.0.1evil:80",
                                     "localhost.example:80",
                                     "0.0.0.0:50051",
                                     "10.0.0.1:80",
                                     "[::1]x:80",
                                     "127.0.0.1:",
                                     "127.0.0.1:123456",
                                     "",
                                     "128.0.0.1:80",
                                     "[::2]:80"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (!zt_net_is_loopback(yes[i], false)) ZT_FAIL("%s is loopback", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        if (zt_net_is_loopback(no[i], false) || zt_net_is_loopback(no[i], true))
            ZT_FAIL("%s is not loopback", no[i]);
    /* an HTTP Host header may come without a port */
    ASSERT_TRUE(zt_net_is_loopback("127.0.0.1", true) && !zt_net_is_loopback("127.0.0.1", false));
    ASSERT_TRUE(zt_net_is_loopback("localhost", true) && zt_net_is_loopback("[::1]", true));
    ASSERT_TRUE(!zt_net_is_loopback(NULL, true));
    printf("test_netutil: ok\n");
    return 0;
}
