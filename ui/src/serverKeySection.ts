// Settings → Local OpenAI server → API key: optional; with one saved, the
// server answers only clients that send `Authorization: Bearer <key>`. The
// app keeps the key in the system keychain (see keychainSecretField.ts); the
// page sees only whether one is saved and its last four characters.
import { api, type ServerKeyView } from './api';
import { h } from './dom';
import { KeychainSecretField } from './keychainSecretField';

export class ServerKeySection {
  readonly el: HTMLElement;
  private field: KeychainSecretField<ServerKeyView>;

  /** `changed` is told after a save or a removal (the server restarted with it). */
  constructor(changed: () => void = () => {}) {
    this.field = new KeychainSecretField<ServerKeyView>({
      id: 'server-api-key',
      testid: 'server-key',
      autocomplete: 'new-password',
      empty: 'Type a key first.',
      status: () => api.serverApiKeyStatus(),
      save: (key) => api.saveServerApiKey(key),
      remove: () => api.removeServerApiKey(),
      describe: (state, v, masked) => {
        if (v.set) state.append('Clients need the key ', masked());
        else state.append('No key: any program on this computer may use the server.');
      },
      placeholder: (v) => (v?.set ? 'Type a new key to replace it' : 'No key'),
      changed,
    });
    this.el = h('div', { class: 'field field-text', 'data-testid': 'server-key-section' },
      h('label', { for: 'server-api-key' }, 'API key', h('span', { class: 'hint', id: 'server-api-key-hint' },
        'Optional: clients must then send it as “Authorization: Bearer …”. Kept in the system keychain, never in the app’s files.')),
      this.field.row,
      this.field.state, this.field.problem);
  }

  refresh(): Promise<void> {
    return this.field.refresh();
  }
}
