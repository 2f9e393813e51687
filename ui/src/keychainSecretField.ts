// A secret the app keeps in the system keychain (the Hub token, the local
// server's API key), as one masked field with Save and Remove. The page
// never receives the secret back: only whether one is saved, a masked form
// and the keychain's error, said where the user is looking. The field is
// made once, so a redraw (the settings page redraws when the model changes)
// keeps a secret being typed.
import { errorText } from './api';
import { clear, h } from './dom';

/** What the app says of a saved secret (HubTokenView, ServerKeyView). */
export interface SecretView {
  set: boolean;
  masked: string | null;
  error: unknown;
}

export interface SecretFieldOptions<V extends SecretView> {
  /** The input's id; also the stem of its hint's id. */
  id: string;
  /** data-testid stem: `<stem>-input`, `-save`, `-remove`, `-state`, `-masked`, `-error`. */
  testid: string;
  autocomplete: string;
  /** Said when Save is pressed on an empty field. */
  empty: string;
  status: () => Promise<V>;
  save: (secret: string) => Promise<V>;
  remove: () => Promise<V>;
  /** Fills the state line for `view` (`masked` is the masked form's element). */
  describe: (state: HTMLElement, view: V, masked: () => HTMLElement) => void;
  placeholder: (view: V | null) => string;
  /** Told after a save or a removal. */
  changed?: () => void;
}

export class KeychainSecretField<V extends SecretView> {
  readonly row: HTMLElement;
  readonly state: HTMLElement;
  readonly problem = h('div', { role: 'alert' });
  private view: V | null = null;
  /** The last Save / Remove failure, until the next try. */
  private failure: string | null = null;
  private busy = false;
  private input: HTMLInputElement;
  private save: HTMLButtonElement;
  private remove: HTMLButtonElement;

  constructor(private o: SecretFieldOptions<V>) {
    this.input = h('input', {
      id: o.id, type: 'password', autocomplete: o.autocomplete, spellcheck: 'false',
      'data-testid': `${o.testid}-input`, 'aria-describedby': `${o.id}-hint`,
    }) as HTMLInputElement;
    this.save = h('button', { 'data-testid': `${o.testid}-save` }, 'Save') as HTMLButtonElement;
    this.remove = h('button', { 'data-testid': `${o.testid}-remove` }, 'Remove') as HTMLButtonElement;
    this.state = h('div', { class: 'hub-token-state', role: 'status', 'data-testid': `${o.testid}-state` });
    this.row = h('div', { class: 'hub-token-row' }, this.input, this.save, this.remove);
    this.save.addEventListener('click', () => this.submit());
    this.input.addEventListener('keydown', (e) => { if (e.key === 'Enter') this.submit(); });
    this.remove.addEventListener('click', () => void this.run(() => o.remove()));
    this.render();
  }

  async refresh(): Promise<void> {
    try {
      this.view = await this.o.status();
    } catch (e) {
      this.failure = errorText(e);
    }
    this.render();
  }

  private submit(): void {
    const secret = this.input.value;
    if (!secret.trim()) {
      this.failure = this.o.empty;
      this.render();
      return;
    }
    void this.run(async () => {
      const view = await this.o.save(secret);
      this.input.value = ''; // saved: the page keeps no copy
      return view;
    });
  }

  private async run(action: () => Promise<V>): Promise<void> {
    this.busy = true;
    this.failure = null;
    this.render();
    try {
      this.view = await action();
      this.o.changed?.();
    } catch (e) {
      this.failure = errorText(e);
    }
    this.busy = false;
    this.render();
  }

  private render(): void {
    const v = this.view;
    clear(this.state);
    if (v) {
      this.o.describe(this.state, v, () => h('code', { 'data-testid': `${this.o.testid}-masked` }, v.masked ?? '…'));
    }
    this.input.placeholder = this.o.placeholder(v);
    this.input.disabled = this.save.disabled = this.remove.disabled = this.busy;
    this.remove.hidden = !v?.set;
    const problem = this.failure ?? (v?.error ? errorText(v.error) : null);
    this.problem.textContent = problem ?? '';
    this.problem.hidden = !problem;
    if (problem) {
      this.problem.className = 'error-note';
      this.problem.setAttribute('data-testid', `${this.o.testid}-error`);
    } else {
      this.problem.removeAttribute('data-testid');
    }
  }
}
