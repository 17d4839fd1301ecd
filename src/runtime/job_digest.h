#pragma once
// What every worker of one job must agree on before training (issue 17): the plan, the schedule
// and its options, the model and its layers' parameter shapes, the seed, batch size and step
// counts, the data (name, sizes and a CRC-32 of its tensors), the SGD settings, the checkpoint
// settings and pipetrain's version. Workers started separately (mpirun, torchrun, by hand) can
// be given different flags; run together they would train the wrong thing without an error.
// The gloo transport exchanges these at rendezvous (GlooTransport::check_agreement).
#include "core/json_doc.h"
#include "model/dataset.h"
#include "model/layered_model.h"
#include "plan/plan.h"
#include "runtime/pipeline_job.h"

namespace pt::runtime {

// An object of the job's settings (nested where they are: sgd, data, plan, flags), which the
// workers compare with json_differences.
json job_digest(const plan::Plan& plan, const PipelineOptions& o, const model::LayeredModel& model,
                const model::DataSplit& data);

}  // namespace pt::runtime
