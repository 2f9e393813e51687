// What Send changes on screen (the message in the chat, the reply's bubble,
// the chat in the sidebar, the status bar, Stop for Send, the emptied box)
// is drawn once, in one task: when both the reply's `started` event and the
// send command's answer are in, whichever comes last. Drawn as each arrived,
// it took the web view two or three frames, each redrawing most of the
// window, while the engine read the prompt; on a machine without a GPU
// those frames take the CPU from the first token (issue 29,
// docs/performance.md "The app's window").
import type { StreamEvent } from './api';
import type { LiveReply } from './streams';

/** How long after the command's answer the draw waits for `started` at most. */
const STARTED_LATEST_MS = 1000;

export class SendDraw {
  private started = false;
  private answered = false;
  private done = false;

  /** `chatId`: the chat the message goes to (null: the chat Send makes,
   * named once the channel says which). */
  constructor(private chatId: number | null, private draw: () => void) {}

  /** The chat Send made. */
  named(chatId: number): void {
    this.chatId = chatId;
  }

  /** Whether this stream event of `chatId` waits for the one drawing: the
   * reply's start does, and so does text that comes before it (a continued
   * answer's text so far, or a first piece that overtook the command's
   * answer, by a millisecond); an error or the reply's end never waits. */
  holds(chatId: number, live: LiveReply): boolean {
    return !this.done && chatId === this.chatId && !live.error && !live.finished;
  }

  /** The reply's channel handler, hearing of its `started` event too. */
  follow(handler: (e: StreamEvent) => void): (e: StreamEvent) => void {
    return (e) => {
      handler(e);
      if (e.kind === 'started') {
        this.started = true;
        this.drawIfDue();
      }
    };
  }

  /** The send command answered (its message is in the page's list). The
   * backend sends `started` before that answer, so it is on its way; should
   * it never come, the message is drawn all the same a moment later. */
  onAnswered(): void {
    this.answered = true;
    this.drawIfDue();
    if (!this.done) window.setTimeout(() => this.now(), STARTED_LATEST_MS);
  }

  /** Draws now, whatever has come (the reply already ended, or failed). */
  now(): void {
    if (this.done) return;
    this.done = true;
    this.draw();
  }

  /** Nothing more waits (the send failed: what failing draws, draws at once). */
  cancel(): void {
    this.done = true;
  }

  private drawIfDue(): void {
    if (this.started && this.answered) this.now();
  }
}
