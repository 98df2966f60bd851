#pragma once
// What this machine can do at best, measured in the same run as a benchmark so that figures
// are compared as ratios (these VMs are small and noisy).

#include <vector>

namespace rayd {

// Round trips of an 8-byte ping-pong over blocking loopback TCP sockets (TCP_NODELAY), in
// microseconds, one sample per round trip: the floor for any RPC.
std::vector<double> LoopbackRoundTripsUs(int samples);
// Warm memcpy bandwidth between two 256 MiB buffers, in GB/s.
double MemcpyGBps();

}  // namespace rayd
