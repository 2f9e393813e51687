// The folder name the export dialog offers: the chat's title as a file name
// (no path separators or characters file systems refuse), short.

export function exportName(title: string): string {
  const name = title.replace(/[\\/:*?"<>|\u0000-\u001f]+/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 60).trim();
  return name && !/^\.+$/.test(name) ? name : 'Chat';
}
