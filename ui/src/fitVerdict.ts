// Will a model run here, in words: the verdict for a normal chat (one answer
// at up to 8,192 tokens) with its numbers, and the worst case — every
// running sequence the load settings allow, each at the full context — as a
// detail line (crates/hub/src/fit.rs). The catalog's cards show the short
// mark only.
import type { FitCheck } from './bindings/FitCheck';
import type { FitLevel } from './bindings/FitLevel';
import { bytes } from './format';
import { h } from './dom';

const FIT_WORDS: Record<FitLevel, string> = {
  green: 'Fits this machine',
  yellow: 'Tight: fits only once other programs give memory back',
  red: 'Does not fit this machine',
};

/** The short mark of a catalog card. */
const MARK_WORDS: Record<FitLevel, string> = { green: 'Fits', yellow: 'Tight', red: 'Too big' };

/** How the worst case ends, in a few words. */
const WORST_WORDS: Record<FitLevel, string> = { green: 'fits', yellow: 'tight', red: 'does not fit' };

/** The fit verdict with its numbers (Hub results, models on disk, Load settings). */
export function fitBlock(fit: FitCheck): HTMLElement {
  const e = fit.estimate;
  const numbers = [
    `weights ${bytes(e.weights)}`,
    `KV cache ${bytes(e.kv_cache)} at ${fit.settings.context.toLocaleString()} tokens${fit.settings.kv_bits ? ` (${fit.settings.kv_bits}-bit)` : ''}`,
    e.vision ? `vision ${bytes(e.vision)}` : null,
    `runtime ${bytes(e.overhead)}`,
  ].filter(Boolean).join(' + ');
  const largest = fit.max_green_context == null ? 'no context fits with room to spare'
    : `largest context that fits: ${fit.max_green_context.toLocaleString()} tokens`;
  return h('div', { class: `fit fit-${fit.level}`, 'data-testid': 'fit', 'data-level': fit.level, title: fit.summary },
    h('strong', {}, FIT_WORDS[fit.level], fit.variant ? ` (${fit.variant})` : ''),
    h('div', { class: 'muted small' }, `a chat needs about ${bytes(e.total)} = ${numbers}; this machine: ${bytes(fit.limit_bytes)} usable, ${bytes(fit.available_bytes)} free now`),
    worstLine(fit),
    h('div', { class: 'muted small', 'data-testid': 'fit-max-context' }, largest));
}

/** "At most, 8 answers at once at 32,768 tokens each: about 11.3 GB (tight)";
 * nothing when the load settings are one chat's. */
export function worstLine(fit: FitCheck): HTMLElement | null {
  const w = fit.worst;
  const same = w.settings.sequences === fit.settings.sequences && w.settings.context === fit.settings.context;
  if (same) return null;
  const answers = w.settings.sequences === 1 ? 'one answer' : `${w.settings.sequences} answers at once`;
  return h('div', { class: `muted small fit-worst fit-worst-${w.level}`, 'data-testid': 'fit-worst', 'data-level': w.level },
    `At most, ${answers} at ${w.settings.context.toLocaleString()} tokens${w.settings.sequences === 1 ? '' : ' each'}: about ${bytes(w.estimate.total)} (${WORST_WORDS[w.level]})`);
}

/** A catalog card's mark: the verdict in a word, the numbers on hover. */
export function fitMark(fit: FitCheck): HTMLElement {
  return h('span', { class: `badge fit-mark fit-${fit.level}`, 'data-testid': 'fit', 'data-level': fit.level,
    title: `${FIT_WORDS[fit.level]}: ${fit.summary}` }, MARK_WORDS[fit.level]);
}
