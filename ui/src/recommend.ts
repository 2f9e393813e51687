// Which catalog model suits this machine best: the largest download whose
// verdict for a normal chat is green (bigger models answer better, and a
// green one still leaves room to spare), one that sees images when two are
// as large. The Models page marks it and a first launch with no model
// suggests it.
import type { CatalogEntry, FitCheck } from './api';

export function bestFit(catalog: CatalogEntry[], fits: Map<string, FitCheck>): CatalogEntry | null {
  let best: CatalogEntry | null = null;
  for (const c of catalog) {
    if (!c.supported || c.source.kind !== 'hub' || fits.get(c.id)?.level !== 'green') continue;
    const better = !best || c.size_bytes > best.size_bytes || (c.size_bytes === best.size_bytes && c.vision && !best.vision);
    if (better) best = c;
  }
  return best;
}
