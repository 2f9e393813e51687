// Entry point: the real platform (Tauri's file dialog and window drops).
import { getCurrentWebview } from '@tauri-apps/api/webview';
import { open, save } from '@tauri-apps/plugin-dialog';
import { api } from './api';
import { App } from './app';
import { interceptLinks } from './links';
import { applyTheme, followSystemTheme } from './theme';

applyTheme();
followSystemTheme();

const app = new App({
  async pickFiles() {
    const picked = await open({ multiple: true, filters: [{ name: 'Images and PDFs', extensions: ['png', 'jpg', 'jpeg', 'webp', 'gif', 'heic', 'heif', 'pdf'] }] });
    if (!picked) return [];
    return Array.isArray(picked) ? picked : [picked];
  },
  async pickChatFile() {
    const picked = await open({ multiple: false, title: 'Import a chat (the chat.json of an export)', filters: [{ name: 'Exported chat (chat.json)', extensions: ['json'] }] });
    return typeof picked === 'string' ? picked : null;
  },
  async pickExportFolder(name) {
    // the name typed becomes a folder: chat.md, chat.json and images/ go in it
    return await save({ title: 'Export the chat to a new folder', defaultPath: name }) ?? null;
  },
  async pickModel(kind) {
    const picked = kind === 'folder'
      ? await open({ directory: true, multiple: false, title: 'Add a model folder (with config.json)' })
      : await open({ multiple: false, title: 'Add a .gguf model file', filters: [{ name: 'GGUF model', extensions: ['gguf'] }] });
    return typeof picked === 'string' ? picked : null;
  },
  onDrop({ over, drop }) {
    void getCurrentWebview().onDragDropEvent((event) => {
      const p = event.payload;
      if (p.type === 'enter' || p.type === 'over') over(true);
      else if (p.type === 'leave') over(false);
      else if (p.type === 'drop') drop(p.paths);
    });
  },
});
document.getElementById('app')!.append(app.el);
// links in answers open in the browser (after the app's scheme check), never in this window
interceptLinks(document, api.openLink, (m) => app.toast(m));
void app.start();
