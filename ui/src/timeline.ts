// Where the page spends a reply's time, from Send to the first text and per
// streamed piece: a few timestamps and counters, kept for the latest reply
// only (window.__vlmTimeline), read by scripts/bench-app-vs-api.sh. Cheap
// enough to stay on: one performance.now() per mark and two per piece.

/** The latest reply's timeline: marks in ms (performance.now()), first time each. */
export interface ReplyTimeline {
  /** 'submit', 'invoke', 'chat-created' (a first message: its chat is made by the send command), 'started', 'first-piece', 'first-draw', 'sent' (the send command's answer), 'sent-shown' (its message drawn). */
  marks: Record<string, number>;
  /** How often, and for how many ms in all, the page did each kind of work:
   * 'event' a stream event handled (listeners included), 'draw' a redraw of
   * the live reply (Markdown, DOM, the scroll's layout), 'render' the whole
   * chat drawn again. */
  work: Record<Work, { count: number; ms: number }>;
  /** The same, as it stood when the first piece of text arrived: what the
   * page did while the engine read the prompt. */
  untilFirstPiece?: Record<Work, { count: number; ms: number }>;
}

export type Work = 'event' | 'draw' | 'render';

const fresh = (): ReplyTimeline => ({
  marks: {}, work: { event: { count: 0, ms: 0 }, draw: { count: 0, ms: 0 }, render: { count: 0, ms: 0 } },
});

let current = fresh();

/** Starts the timeline of a new reply (the user pressed Send, Regenerate, …). */
export function startTimeline(first = 'submit'): void {
  current = fresh();
  (window as unknown as { __vlmTimeline?: ReplyTimeline }).__vlmTimeline = current;
  mark(first);
}

/** Notes when `name` first happened during the current reply. */
export function mark(name: string): void {
  if (name in current.marks) return;
  current.marks[name] = performance.now();
  if (name === 'first-piece') current.untilFirstPiece = JSON.parse(JSON.stringify(current.work));
}

/** Runs `f`, counting it and its time as one piece of `kind` work. */
export function timed<T>(kind: Work, f: () => T): T {
  const t0 = performance.now();
  try {
    return f();
  } finally {
    const w = current.work[kind];
    w.count++;
    w.ms += performance.now() - t0;
  }
}

/** The current timeline (for tests). */
export function timeline(): ReplyTimeline {
  return current;
}
