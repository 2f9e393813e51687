// The engine status bar: model, running and waiting sequences, decode speed,
// KV-cache bytes, prefix- and vision-cache hits (when the engine reports them).
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
    if (e.vision_cache) items.push(`vision hits ${e.vision_cache.hits}/${e.vision_cache.hits + e.vision_cache.misses}`);
  }
  if (server?.running && server.url) items.push(`API ${server.url}`);
  return items;
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
