// Whether a bulk job can run with the model there is, and if not, why in
// words shown beside the disabled Run. Every job asks about images, so a
// model that reads text only cannot run one (it used to start and fail
// with only a passing toast to say why nothing happened).

/** The model as the Bulk page cares: null when none is loaded. */
export interface BulkModel { name: string; vision: boolean; loading?: boolean }

/** Why Run is off, or null when the job can run. */
export function whyCannotRun(model: BulkModel | null): string | null {
  if (!model) return 'No model is loaded: load one that sees images on the Models page to run a job.';
  if (model.loading) return `${model.name} is loading…`;
  if (!model.vision) return `${model.name} reads text only: load a model that sees images (Models) to run a job.`;
  return null;
}
