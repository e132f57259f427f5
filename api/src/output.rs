//! How commands print: aligned tables for people, one JSON object per line for scripts.

use std::io::Write;

use serde::Serialize;

/// Prints `value` as one line of JSON on stdout.
pub fn print_json<T: Serialize>(value: &T) {
    // Serializing our own plain types cannot fail; a closed stdout ends the process anyway.
    let line = serde_json::to_string(value).expect("output types serialize");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Prints `text` on stdout as it is (a generated script, a document); a reader that
/// closed the pipe early (`| head`) is no error.
pub fn print_raw(text: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text);
    let _ = out.flush();
}

/// A table printed with columns padded to their widest cell.
#[derive(Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    #[must_use]
    pub fn new(header: &[&str]) -> Self {
        Self { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    /// Adds a row; missing cells print empty.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Renders the table as text, each line ending in a newline.
    #[must_use]
    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut text = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                if i + 1 == columns {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  "));
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }

    /// Prints the table on stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut table = Table::new(&["NAME", "NODES"]);
        table.row(vec!["echo".into(), "2".into()]);
        table.row(vec!["wordcount".into(), "1".into()]);
        assert_eq!(table.render(), "NAME       NODES\necho       2\nwordcount  1\n");
    }
}
