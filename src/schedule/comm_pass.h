#pragma once
// The communication pass: adds SendActivation/RecvActivation and SendGradient/RecvGradient
// wherever a microbatch crosses from one worker to another (stage s -> s+1 forward, s+1 -> s
// backward). AllReduce and Step are the generators' business.
//
// Where the pairs go. A compute-only schedule is first replayed on a unit clock (F = 1, B = 2,
// or B = W = 1 where the backward is split, AllReduce = 1, Step = 0, free transfers) to get
// one feasible execution. Each transfer gets the time its data is ready; every worker's list
// is then its own actions merged with its transfers by that time (transfers first at ties,
// transfers among themselves by one global order). So every worker meets its transfers in one
// global order, which makes the schedule deadlock-free even when every send and every receive
// blocks until its peer arrives (rendezvous): the validator checks exactly that. A send sits
// right after the compute that produced its data; a receive sits where the data arrives on the
// unit clock, early enough for the runtime to post it before the compute that needs it.
// A compute order with a cycle has no unit-clock replay: its transfers go last and validate()
// reports the deadlock.
#include "schedule/schedule.h"

namespace pt::schedule {

// Returns `compute_only` with the sends and receives added (existing p2p actions are dropped).
Schedule insert_comm(Schedule compute_only);

}  // namespace pt::schedule
