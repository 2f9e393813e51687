// The page's timeline of a reply (what scripts/bench-app-vs-api.sh prints):
// each step keeps the time it first happened, work is counted with its
// time, and a stream's events mark when the reply started and its first piece.
import { describe, expect, it } from 'vitest';
import { mark, startTimeline, timed, timeline } from './timeline';
import { Streams } from './streams';

describe('the reply timeline', () => {
  it('keeps the first time of each step, for the latest reply only', () => {
    startTimeline();
    const first = timeline();
    expect(Object.keys(first.marks)).toEqual(['submit']);
    mark('invoke');
    const at = first.marks.invoke;
    mark('invoke');
    expect(first.marks.invoke).toBe(at);
    expect((window as unknown as { __vlmTimeline: unknown }).__vlmTimeline).toBe(first);
    startTimeline('regenerate');
    expect(Object.keys(timeline().marks)).toEqual(['regenerate']);
    expect(timeline()).not.toBe(first);
  });

  it('counts work by kind with its time, and gives back what the work returns', () => {
    startTimeline();
    expect(timed('draw', () => 7)).toBe(7);
    timed('draw', () => { const t = performance.now(); while (performance.now() - t < 2) { /* spin */ } });
    expect(() => timed('event', () => { throw new Error('bad event'); })).toThrow('bad event');
    const { work } = timeline();
    expect(work.draw.count).toBe(2);
    expect(work.draw.ms).toBeGreaterThanOrEqual(2);
    expect(work.event.count).toBe(1);
    expect(work.render.count).toBe(0);
  });

  it('marks a stream’s start and its first piece, and counts its events', () => {
    startTimeline();
    const s = new Streams();
    const on = s.begin(1);
    on({ kind: 'started', chat_id: 1, reply_id: 2, model: 'm' });
    expect(timeline().marks['first-piece']).toBeUndefined();
    on({ kind: 'content', text: 'Hel' });
    const firstPiece = timeline().marks['first-piece'];
    on({ kind: 'content', text: 'lo' });
    expect(timeline().marks.started).toBeLessThanOrEqual(firstPiece);
    expect(timeline().marks['first-piece']).toBe(firstPiece);
    expect(timeline().work.event.count).toBe(3);
    // what the page did while the prompt was read: the events before the first piece
    expect(timeline().untilFirstPiece?.event.count).toBe(1);
  });
});
