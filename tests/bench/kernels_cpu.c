/* zerotrain bench: speed of the CPU ops (work in progress). */
#include <stdio.h>

int main(void)
{
    printf("bench_kernels_cpu: not written yet\n");
    return 77;
}
