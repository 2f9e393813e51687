// What is typed and attached but not sent, kept per chat: text typed in one
// chat must not follow the user into another one (and get sent there with
// the next message). Kept for the session only, in memory.
import type { Attachment } from './api';

/** A file that was refused as it was attached: shown marked, never sent. */
export interface Rejected { name: string; reason: string }

export interface Draft {
  text: string;
  attachments: Attachment[];
  rejected: Rejected[];
}

export function emptyDraft(): Draft {
  return { text: '', attachments: [], rejected: [] };
}

/** The key of a chat's draft; a chat not created yet (the empty "New chat") has its own. */
export type DraftKey = number | 'new';

export class Drafts {
  private byChat = new Map<DraftKey, Draft>();

  /** The chat's draft, the same object each time until it is forgotten. */
  get(key: DraftKey): Draft {
    let draft = this.byChat.get(key);
    if (!draft) {
      draft = emptyDraft();
      this.byChat.set(key, draft);
    }
    return draft;
  }

  /** The draft under `from` is now under `to` (the new chat got its id by
   * sending); `from` starts empty. */
  move(from: DraftKey, to: DraftKey): void {
    const draft = this.byChat.get(from);
    this.byChat.delete(from);
    if (draft) this.byChat.set(to, draft);
  }

  /** A deleted chat's draft goes with it. */
  forget(key: DraftKey): void {
    this.byChat.delete(key);
  }
}

/** The name a file is shown by: the last part of its path. */
export function fileName(path: string): string {
  return path.split(/[\\/]/).filter(Boolean).pop() ?? path;
}
