// Whether ranks run on one physical GPU, which decides the GPU collectives' transport (NCCL before
// 2.30 refuses two ranks on one device). Judged by the device each rank actually has: its host
// name and the PCI bus id of its current CUDA device, gathered from every rank. That is right for
// every launcher layout, among them Slurm's one GPU per task (each task sees one device, ordinal
// 0, so more tasks per node than visible devices says nothing).
#pragma once
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace eco {

// One rank's record: "HOST|BUS_ID".
std::string gpu_record(const std::string& host, const std::string& bus_id);

// True when two records are equal (two ranks on one GPU of one host).
bool any_gpu_shared(const std::vector<std::string>& records);

// This rank's view, over the world (a collective: every rank calls it): gathers every rank's
// record of (this host, bus_id); true when two are equal. A rank that does not know its device
// (bus_id empty) judges by the launcher's count instead: more ranks on this host (local_ranks())
// than the GPUs it sees (visible_gpus). The caller agrees the ranks' answers (any rank's true
// wins).
bool ranks_share_a_gpu(Communicator& world, const std::string& bus_id, int visible_gpus);

}  // namespace eco
