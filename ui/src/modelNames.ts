// Models are named as the user knows them (the gallery's name), never by
// the app's internal id ("dir:SmolLM2-135M-Instruct-Q4_1.gguf",
// "hf:owner/name"): a chat set to a model says "Answers with SmolLM2 135M".

/** The name to show for model `id`: the gallery's, else the id made readable. */
export function modelLabel(id: string, names: ReadonlyMap<string, string>): string {
  const known = names.get(id);
  if (known) return known;
  // a model not on disk now: its id without the app's prefix and file extension
  const bare = id.replace(/^(dir|hf|cache|file|added):/, '').replace(/\.gguf$/i, '');
  return bare.split(/[\\/]/).length > 2 ? bare.split(/[\\/]/).pop()! : bare;
}
