// The message box: multi-line (Enter sends, Shift+Enter is a newline),
// image thumbnails before sending (removable), paste and file picker here;
// window drops arrive through addPaths from main.ts. Under the box: which
// model answers and whether it sees images. A model that reads text only
// never gets a new image: the box says so and offers a model that sees them.
// Each chat keeps its own draft (text and images; see drafts.ts). Each image
// is checked as it is attached (the app decodes it): a bad file is named,
// marked and never sent.
import { api, attachmentUrl, errorText, type Attachment, type Outgoing } from './api';
import { Drafts, fileName, type Draft, type DraftKey } from './drafts';
import { AnswerFormatPanel, describeFormat, type AnswerFormat } from './answerFormat';
import { clear, h } from './dom';
import { icon } from './icons';
import { startTimeline } from './timeline';
import { documentChip, documentPageImages, documentPagePlan, isDocument, PAGES_AS_IMAGES, type PagePlan } from './documentChip';

export interface ComposerHooks {
  /** `shown` empties the box: called as the message is drawn in the chat (not if sending fails). */
  send(message: Outgoing, shown: () => void): Promise<boolean>;
  stop(): void;
  pickFiles(): Promise<string[]>;
  toast(message: string): void;
  /** Models on disk that see images, to offer when images meet a text-only model. */
  visionModels(): Promise<{ id: string; name: string }[]>;
  switchModel(id: string): Promise<void>;
  openModels(): void;
  /** Sets the open chat's answer format (creating the chat if none is open). */
  setAnswerFormat(format: AnswerFormat | null): Promise<boolean>;
  /** Turns thinking on or off for the open chat (creating the chat if none is open). */
  setThinking(on: boolean): Promise<void>;
}

/** The model that answers, as far as the composer cares. */
export interface ComposerModel { name: string; vision: boolean }

export class Composer {
  readonly el: HTMLElement;
  readonly input: HTMLTextAreaElement;
  private thumbs: HTMLElement;
  private sendButton: HTMLButtonElement;
  private stopButton: HTMLButtonElement;
  private attachButton: HTMLButtonElement;
  private editBanner: HTMLElement;
  private offer: HTMLElement;
  private modelLine: HTMLElement;
  private formatButton: HTMLButtonElement;
  private thinkingButton: HTMLButtonElement;
  private thinkingOn = false;
  private formatLine: HTMLElement;
  private formatPanel: AnswerFormatPanel;
  private answerFormat: AnswerFormat | null = null;
  private rejectedLine: HTMLElement;
  private drafts = new Drafts();
  /** The open chat's draft; the box's text is written into it when the chat changes. */
  private draft: Draft = this.drafts.get('new');
  /** The draft as it was before an edit began, put back when the edit ends. */
  private beforeEdit: Draft | null = null;
  /** Counts offers being worked out: only the latest may show. */
  private offerSeq = 0;
  private busy = false;
  private pending = 0;
  /** A message is on its way: its text shows until it is drawn in the chat, and is not sent again. */
  private sending = false;
  private model: ComposerModel | null = null;
  /** The offer was asked for (the picture button) though no image is attached. */
  private offerWanted = false;
  /** Each attached PDF's pages attached as pictures (for a model that sees), by the PDF's sha256. */
  private documentPages = new Map<string, string[]>();
  /** The first of those pages, by the PDF's sha256. */
  private documentFirst = new Map<string, number>();
  /** What the loaded model gets of each attached PDF (the app plans it for the context), by its sha256. */
  private documentPlans = new Map<string, PagePlan>();

  constructor(private hooks: ComposerHooks) {
    this.input = h('textarea', { rows: 1, placeholder: 'Ask anything', 'aria-label': 'Message', 'data-testid': 'composer-input' });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        void this.submit();
      }
    });
    this.input.addEventListener('input', () => this.autosize());
    this.input.addEventListener('paste', (e) => this.onPaste(e));
    this.thumbs = h('div', { class: 'thumbs', 'data-testid': 'composer-thumbs' });
    this.rejectedLine = h('div', { class: 'thumb-errors', 'data-testid': 'composer-rejected', hidden: true });
    this.sendButton = h('button', { class: 'send primary', title: 'Send (Enter)', 'data-testid': 'send', onclick: () => void this.submit() }, 'Send');
    this.stopButton = h('button', { class: 'stop', title: 'Stop (Esc)', 'data-testid': 'stop', onclick: () => { this.hooks.stop(); this.input.focus(); } }, icon('stop', 14), 'Stop');
    this.editBanner = h('div', { class: 'edit-banner', hidden: true });
    this.offer = h('div', { class: 'vision-offer', role: 'alert', 'data-testid': 'vision-offer', hidden: true });
    this.attachButton = h('button', { class: 'icon attach', title: 'Add images', 'aria-label': 'Add images', 'data-testid': 'attach', onclick: () => void this.pick() }, icon('image', 18));
    this.modelLine = h('span', { class: 'composer-model', 'data-testid': 'composer-model' });
    this.formatPanel = new AnswerFormatPanel((format) => this.hooks.setAnswerFormat(format));
    this.formatButton = h('button', { class: 'icon answer-format', title: 'Answer format (text or JSON)', 'aria-label': 'Answer format', 'aria-pressed': 'false', 'data-testid': 'answer-format', onclick: () => this.toggleFormatPanel() }, '{ }');
    this.formatLine = h('span', { class: 'composer-format', 'data-testid': 'composer-format' });
    this.thinkingButton = h('button', { class: 'chip thinking-toggle', hidden: true, 'aria-pressed': 'false', 'data-testid': 'thinking-toggle',
      title: 'Whether the model thinks before answering, in this chat', onclick: () => void this.hooks.setThinking(!this.thinkingOn) }, 'Thinking');
    this.el = h('div', { class: 'composer' },
      this.editBanner,
      this.offer,
      this.formatPanel.el,
      this.thumbs,
      this.rejectedLine,
      h('div', { class: 'composer-row' }, this.attachButton, this.formatButton, this.input, this.stopButton, this.sendButton),
      h('div', { class: 'composer-foot' },
        h('span', {}, this.thinkingButton, this.modelLine, this.formatLine),
        h('span', { class: 'composer-hint', 'data-testid': 'composer-hint' }, 'Enter sends · Shift+Enter for a new line')));
    this.setBusy(false);
    this.setModel(null);
  }

  setBusy(busy: boolean): void {
    if (busy === this.busy && this.stopButton.hidden === !busy) return; // called for every streamed piece
    const hadFocus = this.stopButton.contains(document.activeElement) || this.sendButton.contains(document.activeElement);
    this.busy = busy;
    this.stopButton.hidden = !busy;
    this.sendButton.hidden = busy;
    // the button that had focus just disappeared: keep the user in the box
    if (hadFocus) this.input.focus();
  }

  /** The open chat's answer format (null: free text). */
  showAnswerFormat(format: AnswerFormat | null): void {
    this.answerFormat = format;
    this.formatButton.setAttribute('aria-pressed', format ? 'true' : 'false');
    this.formatButton.classList.toggle('active', !!format);
    this.formatLine.textContent = format ? ` · ${describeFormat(format)}` : '';
    this.formatPanel.close();
  }

  private toggleFormatPanel(): void {
    if (this.formatPanel.el.hidden) this.formatPanel.open(this.answerFormat);
    else this.formatPanel.close();
  }

  /** The thinking switch: shown for a model that can think, on or off for this chat. */
  showThinking(available: boolean, on: boolean): void {
    this.thinkingOn = on;
    this.thinkingButton.hidden = !available;
    this.thinkingButton.setAttribute('aria-pressed', on ? 'true' : 'false');
    this.thinkingButton.classList.toggle('active', on);
    this.thinkingButton.textContent = on ? 'Thinking on' : 'Thinking off';
  }

  /** The model that answers now (null: none loaded). */
  setModel(model: ComposerModel | null, chatModel: string | null = null): void {
    this.model = model;
    clear(this.modelLine);
    // a chat set to another model loads it when you send
    if (chatModel) this.modelLine.append('Answers with ', h('span', { class: 'composer-model-name' }, chatModel), ' (loaded when you send)');
    else if (!model) this.modelLine.append('No model loaded');
    else this.modelLine.append(h('span', { class: 'composer-model-name' }, model.name), ` · ${model.vision ? 'sees images' : 'reads text only'}`);
    this.attachButton.setAttribute('aria-label', model && !model.vision ? `Add images (${model.name} reads text only)` : 'Add images');
    void this.renderOffer();
  }

  /** Fills the box for editing a message you sent; `onCancel` leaves edit
   * mode. `earlier`: not the last one (the banner says what follows it stays). */
  startEdit(text: string, attachments: Attachment[], onCancel: () => void, earlier = false): void {
    this.beforeEdit ??= { text: this.input.value, attachments: this.draft.attachments, rejected: this.draft.rejected };
    this.input.value = text;
    this.draft.attachments = [...attachments];
    this.draft.rejected = [];
    this.renderThumbs();
    clear(this.editBanner);
    this.editBanner.append(
      h('span', { 'data-testid': 'edit-banner-text' }, earlier
        ? 'Editing an earlier message: sending starts a new branch from it (‹ › goes back to this one and what followed).'
        : 'Editing your last message: sending starts a new branch (‹ › goes back to this one).'),
      h('button', { class: 'link', onclick: () => { this.cancelEdit(); onCancel(); } }, 'Cancel'));
    this.editBanner.hidden = false;
    this.autosize();
    this.input.focus();
  }

  /** Leaves edit mode; the draft from before the edit comes back. */
  endEdit(): void {
    if (!this.editBanner.hidden) this.editBanner.hidden = true;
    const before = this.beforeEdit;
    this.beforeEdit = null;
    if (!before) return;
    this.draft.attachments = before.attachments;
    this.draft.rejected = before.rejected;
    this.input.value = before.text;
    this.renderThumbs();
    this.autosize();
  }

  /** Leaves edit mode without sending (the same as endEdit: what was there before comes back). */
  cancelEdit(): void {
    this.endEdit();
  }

  /** Shows another chat's draft, keeping this one's (an edit under way is given up). */
  switchTo(key: DraftKey): void {
    this.endEdit();
    this.draft.text = this.input.value;
    this.draft = this.drafts.get(key);
    this.input.value = this.draft.text;
    this.renderThumbs();
    this.autosize();
  }

  /** The new chat's draft is now that chat's (it was created by sending). */
  adopt(key: number): void {
    this.drafts.move('new', key);
  }

  /** A deleted chat's draft goes with it. */
  forget(key: DraftKey): void {
    this.drafts.forget(key);
  }

  focus(): void {
    this.input.focus();
  }

  /** Sends `text` as it is (a starter prompt), leaving what is
   * being typed in the box alone. */
  async sendText(text: string): Promise<void> {
    if (this.busy) return;
    await this.hooks.send({ text, attachments: [] }, () => {});
    this.input.focus();
  }

  async addPaths(paths: string[]): Promise<void> {
    for (const path of paths) await this.addWith(() => api.addAttachmentPath(path), fileName(path));
  }

  private sendsImages(): boolean {
    return !this.model || this.model.vision;
  }

  /** Stores an image into the draft it was attached to (the chat may
   * change meanwhile). A file refused by the app is kept in the draft by
   * `name`, marked; with no name (the clipboard could not be read) it is a toast. */
  private async addWith(store: () => Promise<Attachment | null>, name: string | null): Promise<void> {
    const draft = this.draft;
    this.pending++;
    this.updateSendable();
    try {
      const a = await store();
      if (a && !draft.attachments.some((x) => x.sha256 === a.sha256)) {
        draft.attachments.push(a);
        if (isDocument(a)) await this.planDocument(draft, a);
      }
    } catch (e) {
      if (name === null) this.hooks.toast(errorText(e));
      else draft.rejected.push({ name, reason: errorText(e) });
    } finally {
      this.pending--;
      if (draft === this.draft) this.renderThumbs();
      this.updateSendable();
    }
  }

  /** Asks the app what the loaded model gets of the PDF `doc`; a model that sees reads as many
   * of its first pages as pictures as fit the context beside its text (removable like any
   * image). Without a plan (the model is loading) it gets the first four. */
  private async planDocument(draft: Draft, doc: Attachment): Promise<void> {
    let plan: PagePlan | null = null;
    try { plan = await documentPagePlan(doc.sha256); } catch { /* planned as before: the first pages */ }
    if (plan) this.documentPlans.set(doc.sha256, plan);
    if (!this.model?.vision) return;
    const count = plan ? plan.pictures : PAGES_AS_IMAGES;
    if (count > 0) await this.showPages(draft, doc, 1);
  }

  /** How many pages of `sha256` go as pictures at a time. */
  private pictureCount(sha256: string): number {
    return this.documentPlans.get(sha256)?.pictures ?? PAGES_AS_IMAGES;
  }

  /** Puts pages `first`… of the PDF `doc` into `draft` as its pictures, in place of those it had. */
  private async showPages(draft: Draft, doc: Attachment, first: number): Promise<void> {
    const pages = await documentPageImages(doc.sha256, first, this.pictureCount(doc.sha256));
    const before = this.documentPages.get(doc.sha256) ?? [];
    draft.attachments = draft.attachments.filter((x) => !before.includes(x.sha256));
    this.documentPages.set(doc.sha256, pages.map((p) => p.sha256));
    this.documentFirst.set(doc.sha256, first);
    for (const p of pages) if (!draft.attachments.some((x) => x.sha256 === p.sha256)) draft.attachments.push(p);
  }

  private async pick(): Promise<void> {
    if (!this.sendsImages()) {
      // the picker would only fetch images this model cannot take
      this.offerWanted = true;
      await this.renderOffer();
      return;
    }
    try {
      await this.addPaths(await this.hooks.pickFiles());
    } catch (e) {
      this.hooks.toast(errorText(e));
    }
  }

  private onPaste(e: ClipboardEvent): void {
    const data = e.clipboardData;
    const files = [...(data?.files ?? [])].filter((f) => f.type.startsWith('image/'));
    if (files.length > 0) {
      e.preventDefault();
      for (const f of files) void this.addWith(async () => api.addAttachmentBytes(new Uint8Array(await f.arrayBuffer())), f.name || 'The pasted image');
      return;
    }
    // WebKitGTK hands the page no file for a copied picture: with no text
    // to paste either, ask the app to read the system clipboard itself
    if (data && data.getData('text/plain') === '') {
      e.preventDefault();
      void this.addWith(async () => {
        try {
          return await api.pasteClipboardImage();
        } catch (err) {
          throw new Error(`Pasting an image is not available here (${errorText(err)}). Drop the file on the window or use the picture button.`);
        }
      }, null);
    }
  }

  private renderThumbs(): void {
    clear(this.thumbs);
    clear(this.rejectedLine);
    const draft = this.draft;
    for (const a of draft.attachments) {
      if (isDocument(a)) {
        const pages = (this.documentPages.get(a.sha256) ?? []).filter((p) => draft.attachments.some((x) => x.sha256 === p));
        const first = this.documentFirst.get(a.sha256);
        const range = first === undefined ? undefined
          : { first, count: this.pictureCount(a.sha256), show: (from: number) => void this.showPages(draft, a, from).then(() => this.renderThumbs(), (e) => this.hooks.toast(errorText(e))) };
        this.thumbs.append(documentChip(a, {
          pagesAsImages: pages.length,
          remove: () => {
            draft.attachments = draft.attachments.filter((x) => x !== a && !pages.includes(x.sha256));
            this.renderThumbs();
          },
          range,
          plan: this.documentPlans.get(a.sha256),
        }));
        continue;
      }
      const img = h('img', { src: attachmentUrl(a.sha256), alt: 'Attached image' });
      const thumb = h('div', { class: 'thumb', 'data-testid': 'composer-thumb', 'data-sha': a.sha256 }, img,
        h('button', { class: 'remove', title: 'Remove', 'aria-label': 'Remove image', 'data-testid': 'remove-thumb',
          onclick: () => { draft.attachments = draft.attachments.filter((x) => x !== a); this.renderThumbs(); } }, '×'));
      // never a blank square: a picture the web view cannot show is marked
      img.addEventListener('error', () => thumb.classList.add('bad'));
      this.thumbs.append(thumb);
    }
    for (const r of draft.rejected) {
      this.thumbs.append(h('div', { class: 'thumb bad', 'data-testid': 'composer-thumb-bad', title: `${r.name}: ${r.reason}`, role: 'img', 'aria-label': `${r.name}, not attached` },
        h('span', { class: 'thumb-mark', 'aria-hidden': 'true' }, '!'),
        h('span', { class: 'thumb-name' }, r.name),
        h('button', { class: 'remove', title: 'Remove', 'aria-label': `Remove ${r.name}`, 'data-testid': 'remove-thumb',
          onclick: () => { draft.rejected = draft.rejected.filter((x) => x !== r); this.renderThumbs(); } }, '×')));
      this.rejectedLine.append(h('div', {}, h('strong', {}, r.name), ` is not attached: ${r.reason}`));
    }
    this.thumbs.hidden = draft.attachments.length + draft.rejected.length === 0;
    this.rejectedLine.hidden = draft.rejected.length === 0;
    this.updateSendable();
    void this.renderOffer();
  }

  /** The models on disk changed (a download ended, one was deleted): the offer names what is there now. */
  refreshOffer(): Promise<void> {
    return this.renderOffer();
  }

  /** With images and a model that cannot see them: say so, and offer one that can. */
  private async renderOffer(): Promise<void> {
    const seq = ++this.offerSeq;
    const show = !this.sendsImages() && (this.draft.attachments.some((a) => !isDocument(a)) || this.offerWanted);
    if (!show) {
      this.offer.hidden = true;
      this.offerWanted = false;
      return;
    }
    const model = this.model!;
    let candidates: { id: string; name: string }[] = [];
    try { candidates = await this.hooks.visionModels(); } catch { /* the Models button still helps */ }
    // the model or the images changed meanwhile: a later call says what holds now
    if (seq !== this.offerSeq) return;
    clear(this.offer);
    this.offer.append(
      h('span', {}, `${model.name} cannot see images, so they cannot be sent to it.`),
      ...candidates.slice(0, 1).map((c) => h('button', { class: 'primary', 'data-testid': 'switch-vision-model', onclick: () => void this.hooks.switchModel(c.id) }, `Switch to ${c.name}`)),
      h('button', { 'data-testid': 'offer-models', onclick: () => this.hooks.openModels() }, candidates.length ? 'Other models' : 'Find a model that sees images'));
    this.offer.hidden = false;
  }

  private updateSendable(): void {
    this.sendButton.disabled = this.pending > 0;
  }

  private autosize(): void {
    this.input.style.height = 'auto';
    this.input.style.height = `${Math.min(this.input.scrollHeight, 220)}px`;
  }

  private async submit(): Promise<void> {
    if (this.busy || this.pending > 0 || this.sending) return;
    startTimeline();
    const draft = this.draft;
    const text = this.input.value.trim();
    if (!text && draft.attachments.length === 0) return;
    // a PDF goes as text to any model; pictures only to one that sees
    if (draft.attachments.some((a) => !isDocument(a)) && !this.sendsImages()) {
      // refused here, before anything is stored: the text and images stay
      await this.renderOffer();
      this.offer.classList.remove('nudge');
      void this.offer.offsetWidth;
      this.offer.classList.add('nudge');
      return;
    }
    // the files refused as they were attached are not sent, and go with the message
    const message = { text, attachments: draft.attachments.map((a) => a.sha256) };
    // the box empties (and an edit ends) as the message shows in the chat, in
    // the same drawing (sendDraw.ts); a send that fails leaves all as it is
    let emptied = false;
    const empty = () => {
      if (emptied) return;
      emptied = true;
      this.sending = false;
      const thumbs = draft.attachments.length + draft.rejected.length > 0;
      Object.assign(draft, { text: '', attachments: [], rejected: [] });
      if (draft !== this.draft) return; // another chat's draft shows meanwhile
      this.input.value = '';
      if (thumbs) this.renderThumbs();
      // the empty box's own height (rows=1), as before any typing: measuring it
      // (autosize) would lay out the whole window while the prompt is read
      this.input.style.height = '';
      this.endEdit();
    };
    this.sending = true;
    let sent = false;
    try {
      sent = await this.hooks.send(message, empty);
    } finally {
      if (!sent) this.sending = false;
    }
  }
}
