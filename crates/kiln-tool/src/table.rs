//! Aligned tables for people: columns as wide as their widest cell, numbers
//! on the right.

use crate::console::outln;

/// A table being filled.
#[derive(Debug)]
pub struct Table {
    headers: Vec<&'static str>,
    right_aligned: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers; a header ending in `>` is
    /// right-aligned (the `>` is not printed).
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers
                .iter()
                .map(|header| header.trim_end_matches('>'))
                .collect(),
            right_aligned: headers.iter().map(|header| header.ends_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// How many rows it holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The table as text, one line per row after the header.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self
            .headers
            .iter()
            .map(|header| header.chars().count())
            .collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut text = String::new();
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|header| (*header).to_owned())
            .collect();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (column, cell) in row.iter().enumerate() {
                let width = widths[column];
                let padding = width - cell.chars().count();
                if column > 0 {
                    line.push_str("  ");
                }
                if self.right_aligned[column] {
                    line.push_str(&" ".repeat(padding));
                    line.push_str(cell);
                } else {
                    line.push_str(cell);
                    if column + 1 < row.len() {
                        line.push_str(&" ".repeat(padding));
                    }
                }
            }
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }

    /// Prints it.
    pub fn print(&self) {
        crate::console::write_out(format_args!("{}", self.render()));
    }
}

/// Prints `label: value` pairs with the values aligned.
pub fn print_pairs(pairs: &[(&str, String)]) {
    let width = pairs
        .iter()
        .map(|(label, _)| label.len())
        .max()
        .unwrap_or(0);
    for (label, value) in pairs {
        outln!("{label:<width$}  {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_numbers_sit_right() {
        let mut table = Table::new(&["NAME", "SIZE>"]);
        table.row(vec!["a".into(), "1 B".into()]);
        table.row(vec!["longer".into(), "10.0 KiB".into()]);
        assert_eq!(
            table.render(),
            "NAME        SIZE\na            1 B\nlonger  10.0 KiB\n"
        );
    }
}
