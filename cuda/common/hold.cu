// A one-thread kernel that keeps its stream busy for a given time (the GPU's global nanosecond
// timer). The timer queues it before the start event of a timed call, so the host's time to issue
// that call overlaps the wait and stays out of the measured interval (the "blocking kernel" of
// GPU benchmark tools).
extern "C" __global__ void hold_ns(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
