// The engine status bar in words a user knows: the model, how many answers
// are being written and waiting, the speed while something is written, the
// memory in use, prompt tokens the cache spared, and for a model that sees
// images, how many pictures were read anew or reused. With speculative
// decoding: how many drafts were kept, and a draft model's own cache.
import type { EngineStatsView, EngineStatus, ServerStatus } from './api';
import { bytes } from './format';
import { clear, h } from './dom';
import { modelView, statusLabel } from './modelState';

/** The engine's `speculation` figures the bar reads; `draft_prefix_cache`
 * is null unless a draft model drafts (it keeps the prompts it read, so a
 * chat's next turn costs it only the new part). */
interface SpeculationFigures {
  verify_passes: number; drafted_tokens: number; accepted_tokens: number; speculating_rows: number; produced_tokens: number;
  draft_prefix_cache?: { hits: number; misses: number; reused_tokens: number; entries: number; bytes: number } | null;
}

/** `starting`: replies this window has started that the engine does not
 * run yet (their prompt is being prepared): the engine alone would say
 * "idle" while a reply is starting. */
export function statusItems(status: EngineStatus | null, stats: EngineStatsView | null, server: ServerStatus | null, starting = 0): string[] {
  const items: string[] = [statusLabel(modelView(status))];
  if (stats) {
    const e = stats.engine;
    // the app's replies under way (its own count, or this window's) that
    // the engine has not admitted yet are being prepared
    const preparing = Math.max(starting, stats.app_replies ?? 0);
    if (e.running === 0 && e.waiting === 0) items.push(preparing > 0 ? `starting ${plural(preparing, 'answer')}` : 'idle');
    else items.push(`${e.running} answering`);
    if (e.waiting > 0) items.push(`${e.waiting} waiting`);
    // a speed only means something while answers are being written
    if (e.running > 0) items.push(`${Math.round(stats.decode_tps)} tok/s`);
    // speculative decoding, once it has verified drafts: what a pass yields
    const s = e.speculation as SpeculationFigures | undefined;
    if (s && s.verify_passes > 0 && s.drafted_tokens > 0) {
      const kept = Math.round((100 * s.accepted_tokens) / s.drafted_tokens);
      const perPass = s.produced_tokens / Math.max(s.speculating_rows, 1);
      items.push(`drafts kept ${kept}% · ${perPass.toFixed(1)} tokens/pass`);
    }
    // beside them, a draft model's own prompt cache once a prompt reached it
    const d = s?.draft_prefix_cache;
    if (d && d.hits + d.misses > 0) {
      items.push(`draft cache ${plural(d.hits, 'hit')}, reused ${plural(d.reused_tokens, 'token')} · ${d.entries} kept, ${bytes(d.bytes)}`);
    }
    items.push(`memory ${bytes(e.active_memory_bytes)}`);
    const reused = e.prefix_cache?.reused_tokens ?? 0;
    const fromDisk = e.prefix_cache?.disk?.reused_tokens ?? 0;
    if (reused > 0) items.push(`cache reused ${plural(reused, 'token')}${fromDisk > 0 ? ` (${fromDisk} from disk)` : ''}`);
    // the engine reports a vision cache for every model: show it where it
    // means something (a model that sees images, or once it was used)
    const v = e.vision_cache;
    if (v && (status?.model?.vision || v.hits + v.misses > 0)) items.push(`images read ${v.misses} · reused ${v.hits}`);
  }
  if (server?.running && server.url) items.push(`API ${server.url}`);
  return items;
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

export class StatusBar {
  readonly el = h('footer', { class: 'status-bar', 'data-testid': 'status-bar' });

  /** What the bar shows now: it is rebuilt only when this changes. */
  private shown = '';

  /** Called every second (the app polls the engine's figures) and on every
   * change of state: the bar's elements are replaced only when what it says
   * changed, so an idle window does no style, layout or paint work for it. */
  render(status: EngineStatus | null, stats: EngineStatsView | null, server: ServerStatus | null, starting = 0): void {
    const state = status?.state ?? 'unloaded';
    const items = statusItems(status, stats, server, starting);
    const shown = JSON.stringify([state, !!stats, items]);
    if (shown === this.shown) return;
    this.shown = shown;
    clear(this.el);
    this.el.dataset.engine = state;
    this.el.dataset.stats = stats ? 'yes' : 'no';
    const dot = state === 'ready' ? 'ok' : state === 'loading' ? 'busy' : 'off';
    this.el.append(h('span', { class: `dot ${dot}`, 'aria-hidden': 'true' }));
    items.forEach((item, i) => {
      if (i > 0) this.el.append(h('span', { class: 'sep', 'aria-hidden': 'true' }, '·'));
      this.el.append(h('span', { class: 'status-item' }, item));
    });
  }
}
