#pragma once
// What every worker of one job must agree on before training (issue 17): the plan, the schedule
// and its options, the model and its layers' parameter shapes, the seed, batch size and step
// counts, the data (name, sizes and a CRC-32 of its tensors), the SGD settings, the checkpoint
// settings and pipetrain's version. Workers started separately (mpirun, torchrun, by hand) can
// be given different flags; run together they would train the wrong thing without an error.
// The gloo transport exchanges these at rendezvous (GlooTransport::check_agreement).
#include "core/json_doc.h"
#include "job/job.h"
#include "model/dataset.h"
#include "model/layered_model.h"

namespace pt::job {

// An object of the job's settings (nested where they are: sgd, data, plan, flags), which the
// workers compare with json_differences. `described`: the model make_job was given.
json job_digest(const Job& job, const model::LayeredModel& described, const model::DataSplit& data);

}  // namespace pt::job
