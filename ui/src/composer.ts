// The message box: multi-line (Enter sends, Shift+Enter is a newline),
// image thumbnails before sending (removable), paste and file picker here;
// window drops arrive through addPaths from main.ts.
import { api, attachmentUrl, errorText, type Attachment, type Outgoing } from './api';
import { clear, h } from './dom';
import { icon } from './icons';

export interface ComposerHooks {
  send(message: Outgoing): Promise<boolean>;
  stop(): void;
  pickFiles(): Promise<string[]>;
  toast(message: string): void;
}

export class Composer {
  readonly el: HTMLElement;
  readonly input: HTMLTextAreaElement;
  private thumbs: HTMLElement;
  private sendButton: HTMLButtonElement;
  private stopButton: HTMLButtonElement;
  private editBanner: HTMLElement;
  private attachments: Attachment[] = [];
  private busy = false;
  private pending = 0;

  constructor(private hooks: ComposerHooks) {
    this.input = h('textarea', { rows: 1, placeholder: 'Message (Enter to send, Shift+Enter for a new line)', 'aria-label': 'Message', 'data-testid': 'composer-input' });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        void this.submit();
      }
    });
    this.input.addEventListener('input', () => this.autosize());
    this.input.addEventListener('paste', (e) => this.onPaste(e));
    this.thumbs = h('div', { class: 'thumbs', 'data-testid': 'composer-thumbs' });
    this.sendButton = h('button', { class: 'send primary', title: 'Send', 'data-testid': 'send', onclick: () => void this.submit() }, 'Send');
    this.stopButton = h('button', { class: 'stop', title: 'Stop', 'data-testid': 'stop', onclick: () => this.hooks.stop() }, icon('stop', 14), 'Stop');
    this.editBanner = h('div', { class: 'edit-banner', hidden: true });
    const attach = h('button', { class: 'icon attach', title: 'Add images', 'aria-label': 'Add images', 'data-testid': 'attach', onclick: () => void this.pick() }, icon('image', 18));
    this.el = h('div', { class: 'composer' },
      this.editBanner,
      this.thumbs,
      h('div', { class: 'composer-row' }, attach, this.input, this.stopButton, this.sendButton));
    this.setBusy(false);
  }

  setBusy(busy: boolean): void {
    this.busy = busy;
    this.stopButton.hidden = !busy;
    this.sendButton.hidden = busy;
  }

  /** Fills the box for editing the last message; `onCancel` leaves edit mode. */
  startEdit(text: string, attachments: Attachment[], onCancel: () => void): void {
    this.input.value = text;
    this.attachments = [...attachments];
    this.renderThumbs();
    clear(this.editBanner);
    this.editBanner.append('Editing your last message', h('button', { class: 'link', onclick: () => { this.endEdit(); onCancel(); } }, 'Cancel'));
    this.editBanner.hidden = false;
    this.autosize();
    this.input.focus();
  }

  endEdit(): void {
    this.editBanner.hidden = true;
  }

  focus(): void {
    this.input.focus();
  }

  async addPaths(paths: string[]): Promise<void> {
    for (const path of paths) await this.addWith(() => api.addAttachmentPath(path));
  }

  private async addWith(store: () => Promise<Attachment>): Promise<void> {
    this.pending++;
    this.updateSendable();
    try {
      const a = await store();
      if (!this.attachments.some((x) => x.sha256 === a.sha256)) this.attachments.push(a);
      this.renderThumbs();
    } catch (e) {
      this.hooks.toast(errorText(e));
    } finally {
      this.pending--;
      this.updateSendable();
    }
  }

  private async pick(): Promise<void> {
    try {
      await this.addPaths(await this.hooks.pickFiles());
    } catch (e) {
      this.hooks.toast(errorText(e));
    }
  }

  private onPaste(e: ClipboardEvent): void {
    const files = [...(e.clipboardData?.files ?? [])].filter((f) => f.type.startsWith('image/'));
    if (files.length === 0) return;
    e.preventDefault();
    for (const f of files) void this.addWith(async () => api.addAttachmentBytes(new Uint8Array(await f.arrayBuffer())));
  }

  private renderThumbs(): void {
    clear(this.thumbs);
    for (const a of this.attachments) {
      this.thumbs.append(h('div', { class: 'thumb', 'data-testid': 'composer-thumb', 'data-sha': a.sha256 },
        h('img', { src: attachmentUrl(a.sha256), alt: 'Attached image' }),
        h('button', { class: 'remove', title: 'Remove', 'aria-label': 'Remove image', 'data-testid': 'remove-thumb',
          onclick: () => { this.attachments = this.attachments.filter((x) => x !== a); this.renderThumbs(); } }, '×')));
    }
    this.thumbs.hidden = this.attachments.length === 0;
    this.updateSendable();
  }

  private updateSendable(): void {
    this.sendButton.disabled = this.pending > 0;
  }

  private autosize(): void {
    this.input.style.height = 'auto';
    this.input.style.height = `${Math.min(this.input.scrollHeight, 220)}px`;
  }

  private async submit(): Promise<void> {
    if (this.busy || this.pending > 0) return;
    const text = this.input.value.trim();
    if (!text && this.attachments.length === 0) return;
    const message = { text, attachments: this.attachments.map((a) => a.sha256) };
    // cleared at once, as chat apps do; put back if sending fails
    const kept = { value: this.input.value, attachments: this.attachments };
    this.input.value = '';
    this.attachments = [];
    this.renderThumbs();
    this.autosize();
    if (await this.hooks.send(message)) {
      this.endEdit();
    } else {
      this.input.value = kept.value;
      this.attachments = kept.attachments;
      this.renderThumbs();
      this.autosize();
    }
  }
}
