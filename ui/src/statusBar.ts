// The engine status bar: model, running and waiting sequences, decode speed,
// KV-cache bytes, prefix-cache hits, and vision-cache hits and misses for a
// model that sees images (an image encoded anew is a miss, one reused a hit).
import type { EngineStatsView, EngineStatus, ServerStatus } from './api';
import { bytes } from './format';
import { clear, h } from './dom';

export function statusItems(status: EngineStatus | null, stats: EngineStatsView | null, server: ServerStatus | null): string[] {
  const items: string[] = [];
  if (!status || status.state === 'unloaded') items.push(status?.error ? `Load failed: ${status.error.message}` : 'No model loaded');
  else if (status.state === 'loading') items.push(`Loading ${status.loading ?? ''}…`);
  else items.push(status.model?.name ?? 'Ready');
  if (stats) {
    const e = stats.engine;
    items.push(`${e.running} running`, `${e.waiting} waiting`, `${stats.decode_tps.toFixed(1)} tok/s`, `KV ${bytes(e.kv_cache_bytes)}`);
    if (e.prefix_cache) items.push(`prefix hits ${e.prefix_cache.hits}`);
    // the engine reports a vision cache for every model: show it where it
    // means something (a model that sees images, or once it was used)
    const v = e.vision_cache;
    if (v && (status?.model?.vision || v.hits + v.misses > 0)) items.push(`vision cache ${plural(v.hits, 'hit')} · ${plural(v.misses, 'miss', 'misses')}`);
  }
  if (server?.running && server.url) items.push(`API ${server.url}`);
  return items;
}

function plural(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

export class StatusBar {
  readonly el = h('footer', { class: 'status-bar', 'data-testid': 'status-bar' });

  render(status: EngineStatus | null, stats: EngineStatsView | null, server: ServerStatus | null): void {
    clear(this.el);
    const dot = status?.state === 'ready' ? 'ok' : status?.state === 'loading' ? 'busy' : 'off';
    this.el.append(h('span', { class: `dot ${dot}` }));
    for (const item of statusItems(status, stats, server)) this.el.append(h('span', { class: 'status-item' }, item));
  }
}
