// The live reply's redraws are batched (one per LIVE_REDRAW_MS, however many
// pieces arrive), except its first text, which is drawn at once, in the
// event's own task; the status bar, rendered every second, is rebuilt only
// when what it says changes; a reply's listeners hear of it after the command
// that starts it is sent.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ChatView, LIVE_REDRAW_MS, liveRedrawDelay } from './chatView';
import { StatusBar } from './statusBar';
import { Streams, type LiveReply } from './streams';
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

describe('ChatView live reply', () => {
  const noHooks = { regenerate: () => {}, edit: () => {}, continueReply: () => {}, sendStarter: () => {}, openModels: () => {}, switchBranch: () => {}, deleteBranch: () => {} };
  const answer = (view: ChatView) => view.el.querySelector('[data-testid="msg-live"] [data-testid="answer"]')?.textContent?.trim();

  afterEach(() => { vi.useRealTimers(); document.body.innerHTML = ''; });

  it('draws text that is due in the event itself, and the rest at most every LIVE_REDRAW_MS', () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const view = new ChatView(noHooks);
    document.body.append(view.el);
    view.show([], null);
    const live: LiveReply = { chatId: 1, replyId: 2, model: 'M', content: '', reasoning: '', error: null, finished: null, stored: [], toolCall: null };
    view.updateLive(live); // no text yet: the dots wait for a timer
    expect(answer(view)).toBeUndefined();
    live.content = 'Hel';
    view.updateLive(live);
    expect(answer(view)).toBe('Hel'); // no task in between
    live.content = 'Hello';
    view.updateLive(live);
    live.content = 'Hello, world';
    view.updateLive(live);
    expect(answer(view)).toBe('Hel'); // batched
    vi.advanceTimersByTime(LIVE_REDRAW_MS);
    expect(answer(view)).toBe('Hello, world');
    // long after the last draw, the next piece is due at once
    vi.advanceTimersByTime(10 * LIVE_REDRAW_MS);
    live.content = 'Hello, world!';
    view.updateLive(live);
    expect(answer(view)).toBe('Hello, world!');
  });
});

describe('Streams.begin', () => {
  it('tells its listeners after the code that began it (the command is sent first)', async () => {
    const s = new Streams();
    const seen: number[] = [];
    s.subscribe((chatId) => seen.push(chatId));
    s.begin(1);
    expect(seen).toEqual([]);
    expect(s.isRunning(1)).toBe(true);
    await Promise.resolve();
    expect(seen).toEqual([1]);
    // a reply abandoned meanwhile is not announced as running
    s.begin(2);
    s.abandon(2);
    await Promise.resolve();
    expect(seen).toEqual([1, 2]);
    expect(s.isRunning(2)).toBe(false);
  });
});
