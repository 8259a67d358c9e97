"""A producer sends steadily at its quota, then bursts: print the throttle times Kafka
would answer with (the KIP-13 example: 5 MiB/s quota, steady for 10 s, then 15 MiB)."""

import kquota

MIB = 1024 * 1024

produce = kquota.QuotaManager("produce")  # Kafka's defaults: 11 windows of 1 s
produce.set_quota(kquota.Entity(user="alice"), 5 * MIB)

print(f"{'t (ms)':>8} {'bytes':>10} {'rate (MiB/s)':>13} {'throttle (ms)':>14}")
for second in range(10):
    for tenth in range(10):
        now = second * 1000 + tenth * 100
        throttle = produce.record("alice", "app-1", MIB // 2, now_ms=now)
    rate = produce.measure("alice", "app-1", now_ms=now) or 0.0
    print(f"{now:>8} {MIB // 2:>10} {rate / MIB:>13.3f} {throttle:>14}")

now = 10_000
throttle = produce.record("alice", "app-1", 15 * MIB, now_ms=now)
rate = produce.measure("alice", "app-1", now_ms=now) or 0.0
print(f"{now:>8} {15 * MIB:>10} {rate / MIB:>13.3f} {throttle:>14}  <- 15 MiB burst")
if throttle > 0:
    produce.throttle("alice", "app-1", throttle, now_ms=now)
    print(f"channel muted until t = {now + throttle} ms; delay queue size {produce.queue_size()}")
