// The live reply's redraws are batched (one per LIVE_REDRAW_MS, however many
// pieces arrive), except its first text, which is drawn at once; the status
// bar, rendered every second, is rebuilt only when what it says changes.
import { describe, expect, it } from 'vitest';
import { LIVE_REDRAW_MS, liveRedrawDelay } from './chatView';
import { StatusBar } from './statusBar';
import type { EngineStatsView, EngineStatus } from './api';

describe('liveRedrawDelay', () => {
  it('waits out the rest of LIVE_REDRAW_MS after the last draw', () => {
    expect(liveRedrawDelay(1000, 1010, false)).toBe(LIVE_REDRAW_MS - 10);
    expect(liveRedrawDelay(1000, 1000 + LIVE_REDRAW_MS + 5, false)).toBe(0);
  });

  it('draws the first text at once, however recent the last draw', () => {
    expect(liveRedrawDelay(1000, 1001, true)).toBe(0);
  });
});

describe('StatusBar', () => {
  const status = { state: 'ready', model: { name: 'M', vision: false } } as unknown as EngineStatus;
  const stats = (memory: number) => ({
    engine: { running: 0, waiting: 0, active_memory_bytes: memory, prefix_cache: null, vision_cache: null },
    decode_tps: 0, app_replies: 0,
  }) as unknown as EngineStatsView;

  it('keeps its elements while what it says stays the same', () => {
    const bar = new StatusBar();
    bar.render(status, stats(1e9), null);
    const first = bar.el.firstElementChild;
    const text = bar.el.textContent;
    bar.render(status, stats(1e9), null);
    expect(bar.el.firstElementChild).toBe(first);
    expect(bar.el.textContent).toBe(text);
    bar.render(status, stats(2e9), null);
    expect(bar.el.firstElementChild).not.toBe(first);
    expect(bar.el.textContent).not.toBe(text);
  });
});
