#pragma once
// Network helpers of Ray's utilities that Ray C++ programs call.

#include <string>

namespace rayd {

// The IP address of this host's interface that routes toward `address` ("host:port", or
// "[v6]:port"): what a peer at that address would see us as (Ray's
// GetNodeIpAddressFromPerspective). Connecting a UDP socket picks the route and sends nothing,
// so it works without the peer. An IPv4 answer is preferred when the host has both. Returns
// "127.0.0.1" when the address does not parse or resolve, or nothing routes to it. Needs no
// rayd::Init; safe from any thread.
std::string GetNodeIpAddressFromPerspective(const std::string& address = "8.8.8.8:53");

}  // namespace rayd
