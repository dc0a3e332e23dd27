//! Tables for people, laid out by comfy-table: fitted to the terminal's
//! width (a long text cell wraps inside its column between words rather
//! than the line running past the edge), numbers on the right, no borders.
//! A number, a size or a time is never split from its unit: its column is
//! as wide as its widest cell, and a number column's header wraps between
//! words instead. When even that does not fit, the rightmost columns are
//! left out, one at a time, and a last line names them (`--wide` shows
//! every column).
//!
//! The width is the process's, chosen once by [`set_width`]: the
//! terminal's columns when standard output is one, [`DEFAULT_WIDTH`] when
//! its size is unknown, and no limit with `--wide` or when standard output
//! is no terminal (a pipe, a file): there every record is one line, so
//! `grep` and `head` see whole names.

use std::sync::atomic::{AtomicU16, Ordering};

use comfy_table::{CellAlignment, ColumnConstraint, ContentArrangement, presets};

/// The width tables keep to on a terminal whose size is unknown.
pub const DEFAULT_WIDTH: u16 = 80;

/// The width tables keep to; 0 for no limit (`--wide`).
static WIDTH: AtomicU16 = AtomicU16::new(DEFAULT_WIDTH);

/// Sets the width every table of the run keeps to: `None` for no limit.
pub fn set_width(width: Option<u16>) {
    WIDTH.store(width.unwrap_or(0), Ordering::Relaxed);
}

/// Whether tables are printed at full width, every value whole
/// (`--wide`).
pub fn is_wide() -> bool {
    WIDTH.load(Ordering::Relaxed) == 0
}

/// The width of the terminal standard output is ([`DEFAULT_WIDTH`] when
/// it does not say), or `None` when it is no terminal: a pipe or a file
/// gets every record on one line.
pub fn terminal_width() -> Option<u16> {
    // SAFETY: `isatty` and `ioctl(TIOCGWINSZ)` only read the descriptor's
    // state into `size`, a plain struct owned here.
    let (terminal, columns) = unsafe {
        let mut size: libc::winsize = std::mem::zeroed();
        if libc::isatty(libc::STDOUT_FILENO) == 1 {
            let answered = libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) == 0;
            (true, if answered { size.ws_col } else { 0 })
        } else {
            (false, 0)
        }
    };
    terminal.then_some(if columns == 0 { DEFAULT_WIDTH } else { columns })
}

/// The longest word of a text column kept whole when the width is short.
const LONGEST_UNCUT: usize = 12;

/// A table being filled.
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<&'static str>,
    right_aligned: Vec<bool>,
    /// Columns left out first when the table does not fit.
    optional: Vec<bool>,
    rows: Vec<Vec<String>>,
    /// What each row sorts by, where it is not its cells.
    sort_keys: Vec<Option<Vec<String>>>,
}

impl Table {
    /// A table with these column headers; a header ending in `>` is a
    /// column of numbers, sizes or ages: right-aligned, its cells never
    /// wrapped; a header starting with `?` is a column left out first
    /// when the table does not fit (neither mark is printed).
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers
                .iter()
                .map(|header| header.trim_end_matches('>').trim_start_matches('?'))
                .collect(),
            right_aligned: headers.iter().map(|header| header.ends_with('>')).collect(),
            optional: headers
                .iter()
                .map(|header| header.starts_with('?'))
                .collect(),
            rows: Vec::new(),
            sort_keys: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
        self.sort_keys.push(None);
    }

    /// Adds a row that [`sort`](Self::sort) places by `key` rather than by
    /// its cells.
    pub fn row_sorted_by(&mut self, key: Vec<String>, cells: Vec<String>) {
        self.rows.push(cells);
        self.sort_keys.push(Some(key));
    }

    /// How many rows it holds.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Sorts the rows by their sort keys, else their cells, first column
    /// first, numbers inside the text by their value (`N=4` before
    /// `N=16`).
    pub fn sort(&mut self) {
        let mut rows: Vec<(Vec<String>, Option<Vec<String>>)> = std::mem::take(&mut self.rows)
            .into_iter()
            .zip(std::mem::take(&mut self.sort_keys))
            .collect();
        rows.sort_by(|(cells, key), (other_cells, other_key)| {
            let key = key.as_ref().unwrap_or(cells);
            let other_key = other_key.as_ref().unwrap_or(other_cells);
            key.iter()
                .zip(other_key)
                .map(|(text, other)| natural_order(text, other))
                .find(|order| order.is_ne())
                .unwrap_or_else(|| key.len().cmp(&other_key.len()))
        });
        (self.rows, self.sort_keys) = rows.into_iter().unzip();
    }

    /// The table as text at the run's width, one line per row after the
    /// header (more where a cell wraps).
    pub fn render(&self) -> String {
        let width = WIDTH.load(Ordering::Relaxed);
        self.render_at((width > 0).then_some(width))
    }

    /// The table as text within `width` columns (`None`: no limit). Where
    /// its columns do not fit with their numbers whole and each text column
    /// at its longest word, columns are left out until they do (those
    /// marked optional first, then the rightmost, never the first), and a
    /// last line names them.
    pub fn render_at(&self, width: Option<u16>) -> String {
        let Some(limit) = width else {
            return self.render_columns(None);
        };
        let mut kept = self.clone();
        let mut left_out = Vec::new();
        // Optional columns go first while a text column would have to cut
        // a word; any column, while even their least does not fit.
        while kept.optional.iter().skip(1).any(|&optional| optional)
            && !kept.fits(limit, Self::longest_word)
        {
            let index = (1..kept.headers.len())
                .rev()
                .find(|&index| kept.optional[index])
                .unwrap_or(kept.headers.len() - 1);
            left_out.push((index, kept.headers[index]));
            kept.remove_column(index);
        }
        while kept.headers.len() > 1 && !kept.fits(limit, Self::narrowest) {
            let index = (1..kept.headers.len())
                .rev()
                .find(|&index| kept.optional[index])
                .unwrap_or(kept.headers.len() - 1);
            left_out.push((index, kept.headers[index]));
            kept.remove_column(index);
        }
        let mut text = kept.render_columns(Some(limit));
        if !left_out.is_empty() {
            // Named in the order they stood.
            let mut order: Vec<usize> = (0..self.headers.len()).collect();
            let left_out: Vec<&str> = left_out
                .into_iter()
                .map(|(index, header)| {
                    let original = order.remove(index);
                    (original, header)
                })
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_values()
                .collect();
            text.push_str(&format!(
                "(left out to fit {limit} columns: {}; --wide shows them)\n",
                left_out.join(", ")
            ));
        }
        text
    }

    /// Whether every column fits within `width` with its numbers whole and
    /// each text column as wide as `text_width` says (its longest word,
    /// or what most of its cells need).
    fn fits(&self, width: u16, text_width: fn(&Self, usize) -> u16) -> bool {
        let last = self.headers.len().saturating_sub(1);
        let least: u32 = (0..self.headers.len())
            .map(|index| {
                let padding = if index == last { 0 } else { 2 };
                let least = if self.right_aligned[index] {
                    self.cells_whole(index)
                } else {
                    text_width(self, index)
                };
                u32::from(least) + padding
            })
            .sum();
        least <= u32::from(width)
    }

    /// Leaves column `index` out.
    fn remove_column(&mut self, index: usize) {
        self.headers.remove(index);
        self.right_aligned.remove(index);
        self.optional.remove(index);
        for row in &mut self.rows {
            if index < row.len() {
                row.remove(index);
            }
        }
    }

    /// The table's columns as text within `width` (`None`: no limit).
    fn render_columns(&self, width: Option<u16>) -> String {
        let mut table = comfy_table::Table::new();
        table.load_style(presets::NOTHING);
        match width {
            Some(width) => {
                table
                    .set_content_arrangement(ContentArrangement::Dynamic)
                    .set_width(width);
            }
            None => {
                table.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        table.set_header(self.headers.clone());
        for row in &self.rows {
            table.add_row(row.clone());
        }
        let last = self.headers.len().saturating_sub(1);
        let padding = |index: usize| if index == last { 0 } else { 2 };
        let widths = self.column_widths(width, padding);
        let mut constraints = Vec::new();
        for (index, column) in table.column_iter_mut().enumerate() {
            // Two spaces between columns, none after the last.
            column.set_padding((0, padding(index)));
            if self.right_aligned[index] {
                column.set_cell_alignment(CellAlignment::Right);
            }
            // A width counts the padding too.
            constraints.push(ColumnConstraint::Absolute(comfy_table::Width::Fixed(
                widths[index],
            )));
        }
        table.set_constraints(constraints);
        let mut text = String::new();
        for line in table.lines() {
            text.push_str(line.trim_end());
            text.push('\n');
        }
        text
    }

    /// Each column's width, padding included, to keep the table within
    /// `width`: every column as wide as its widest line when that fits.
    /// Else numbers, sizes and ages stay on one line and the text columns
    /// wrap: each is given first what most of its cells need (nine in
    /// ten), then what is left, by how much more its wider cells would
    /// take; a rare wide cell (a driver's long name) wraps rather than
    /// squeezing every other row. Where even that does not fit, each text
    /// column keeps its longest word (at most [`LONGEST_UNCUT`]) and the
    /// rest is shared by what most of its cells need.
    fn column_widths(&self, width: Option<u16>, padding: impl Fn(usize) -> u16) -> Vec<u16> {
        let columns = self.headers.len();
        let widest: Vec<u32> = (0..columns)
            .map(|index| u32::from(self.widest(index) + padding(index)))
            .collect();
        let Some(width) = width
            .map(u32::from)
            .filter(|&width| widest.iter().sum::<u32>() > width)
        else {
            return widest.into_iter().map(|width| width as u16).collect();
        };
        // A text column's least is its longest word where every word fits
        // whole, else that word cut at [`LONGEST_UNCUT`].
        let least_of = |width_of: fn(&Self, usize) -> u16| -> Vec<u32> {
            (0..columns)
                .map(|index| u32::from(width_of(self, index) + padding(index)))
                .collect()
        };
        let least = if self.fits(u16::try_from(width).unwrap_or(u16::MAX), Self::longest_word) {
            least_of(Self::longest_word)
        } else {
            least_of(Self::narrowest)
        };
        let typical: Vec<u32> = (0..columns)
            .map(|index| (u32::from(self.typical(index) + padding(index))).max(least[index]))
            .collect();
        // A number's cells are kept whole; its header may wrap.
        let cells_whole: Vec<u32> = (0..columns)
            .map(|index| u32::from(self.cells_whole(index) + padding(index)))
            .collect();
        let text = |index: usize| !self.right_aligned[index];
        let start = |wanted: &[u32], numbers: &[u32]| -> Vec<u32> {
            (0..columns)
                .map(|index| {
                    if text(index) {
                        wanted[index]
                    } else {
                        numbers[index]
                    }
                })
                .collect()
        };
        let fits = |widths: &[u32]| widths.iter().sum::<u32>() <= width;
        let (mut widths, goal, numbers_wrap) = if fits(&start(&typical, &widest)) {
            (start(&typical, &widest), widest.clone(), false)
        } else if fits(&start(&least, &widest)) {
            (start(&least, &widest), start(&typical, &widest), false)
        } else {
            // Numbers' headers wrap between words; their cells stay whole
            // (`render_at` left out what does not fit even so).
            (start(&least, &cells_whole), start(&typical, &widest), true)
        };
        let wraps = |index: usize| text(index) || numbers_wrap;
        let mut room = width.saturating_sub(widths.iter().sum());
        let mut short: Vec<usize> = (0..columns)
            .filter(|&index| wraps(index) && widths[index] < goal[index])
            .collect();
        // A column a little short of its goal gets it whole when that is
        // no more than its share of the room: one line rather than two.
        while let Some(fair) = room.checked_div(short.len() as u32) {
            let before = short.len();
            short.retain(|&index| {
                let deficit = goal[index] - widths[index];
                if deficit <= fair {
                    widths[index] += deficit;
                    room -= deficit;
                    false
                } else {
                    true
                }
            });
            if short.len() == before {
                break;
            }
        }
        // The rest, by how far each is from its goal.
        let total_deficit: u32 = short.iter().map(|&index| goal[index] - widths[index]).sum();
        if total_deficit > 0 {
            let mut given = 0;
            for &index in &short {
                let deficit = goal[index] - widths[index];
                let share =
                    (u64::from(room) * u64::from(deficit) / u64::from(total_deficit)) as u32;
                widths[index] += share.min(deficit);
                given += share.min(deficit);
            }
            // What rounding left, to the furthest below its goal.
            if let Some(&index) = short
                .iter()
                .max_by_key(|&&index| goal[index] - widths[index])
            {
                widths[index] += room.saturating_sub(given);
            }
        }
        widths
            .into_iter()
            .map(|width| u16::try_from(width).unwrap_or(u16::MAX))
            .collect()
    }

    /// The widest cell of column `index`, its header left out but for its
    /// longest word.
    fn cells_whole(&self, index: usize) -> u16 {
        let widest = self
            .rows
            .iter()
            .filter_map(|row| row.get(index))
            .flat_map(|cell| cell.lines())
            .map(|line| line.chars().count())
            .chain(
                self.headers[index]
                    .split_whitespace()
                    .map(|word| word.chars().count()),
            )
            .max()
            .unwrap_or(1);
        u16::try_from(widest).unwrap_or(u16::MAX)
    }

    /// The width nine in ten of column `index`'s cells fit in, and its
    /// header.
    fn typical(&self, index: usize) -> u16 {
        let mut widths: Vec<usize> = self
            .rows
            .iter()
            .filter_map(|row| row.get(index))
            .map(|cell| {
                cell.lines()
                    .map(|line| line.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        widths.sort_unstable();
        let typical = widths
            .get((widths.len() * 9).div_ceil(10).saturating_sub(1))
            .copied()
            .unwrap_or(0)
            .max(self.headers[index].chars().count());
        u16::try_from(typical).unwrap_or(u16::MAX)
    }

    /// The widest line of column `index`, header included.
    fn widest(&self, index: usize) -> u16 {
        let widest = std::iter::once(self.headers[index])
            .chain(
                self.rows
                    .iter()
                    .filter_map(|row| row.get(index).map(String::as_str)),
            )
            .flat_map(str::lines)
            .map(|line| line.chars().count())
            .max()
            .unwrap_or(1);
        u16::try_from(widest).unwrap_or(u16::MAX)
    }

    /// The narrowest column `index` may be: its longest word, so that a
    /// cell wraps between words and a number or a size is never cut; a
    /// column of text words longer than [`LONGEST_UNCUT`] may cut them
    /// rather than crowd the others out.
    fn narrowest(&self, index: usize) -> u16 {
        let longest = self.longest_word(index);
        if self.right_aligned[index] {
            longest
        } else {
            longest.min(u16::try_from(LONGEST_UNCUT).unwrap_or(u16::MAX))
        }
    }

    /// The longest word of column `index`, header included.
    fn longest_word(&self, index: usize) -> u16 {
        let longest = std::iter::once(self.headers[index])
            .chain(
                self.rows
                    .iter()
                    .filter_map(|row| row.get(index).map(String::as_str)),
            )
            .flat_map(str::split_whitespace)
            .map(|word| word.chars().count())
            .max()
            .unwrap_or(1);
        u16::try_from(longest).unwrap_or(u16::MAX)
    }

    /// Prints it.
    pub fn print(&self) {
        crate::console::write_out(format_args!("{}", self.render()));
    }
}

/// `text` against `other` as people order them: runs of digits by their
/// value, the rest by character.
fn natural_order(text: &str, other: &str) -> std::cmp::Ordering {
    let (mut text, mut other) = (text, other);
    loop {
        let (Some(first), Some(other_first)) = (text.chars().next(), other.chars().next()) else {
            return text.len().cmp(&other.len());
        };
        let order = if first.is_ascii_digit() && other_first.is_ascii_digit() {
            let digits = text
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len());
            let other_digits = other
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(other.len());
            let (number, rest) = text.split_at(digits);
            let (other_number, other_rest) = other.split_at(other_digits);
            let trimmed = number.trim_start_matches('0');
            let other_trimmed = other_number.trim_start_matches('0');
            let order = trimmed
                .len()
                .cmp(&other_trimmed.len())
                .then_with(|| trimmed.cmp(other_trimmed))
                .then_with(|| number.len().cmp(&other_number.len()));
            (text, other) = (rest, other_rest);
            order
        } else {
            let order = first.cmp(&other_first);
            (text, other) = (&text[first.len_utf8()..], &other[other_first.len_utf8()..]);
            order
        };
        if order.is_ne() {
            return order;
        }
    }
}

/// Prints `label: value` pairs with the values aligned, each value
/// wrapped within the run's width under its first line.
pub fn print_pairs(pairs: &[(&str, String)]) {
    let width = WIDTH.load(Ordering::Relaxed);
    crate::console::write_out(format_args!(
        "{}",
        pairs_at(pairs, (width > 0).then_some(width))
    ));
}

/// Prints `label` and `text` after it on one line, wrapped within the
/// run's width under the text's first line, numbers beside their units.
pub fn print_labelled(label: &str, text: &str) {
    let width = WIDTH.load(Ordering::Relaxed);
    let indent = label.chars().count() + 1;
    let lines = match width {
        0 => vec![text.to_owned()],
        width => wrapped(text, usize::from(width).saturating_sub(indent).max(20)),
    };
    for (index, line) in lines.iter().enumerate() {
        let label = if index == 0 { label } else { "" };
        crate::console::write_out(format_args!("{label:<indent$}{line}\n"));
    }
}

/// `label: value` pairs as text within `width` columns (`None`: no limit).
fn pairs_at(pairs: &[(&str, String)], width: Option<u16>) -> String {
    let labels = pairs
        .iter()
        .map(|(label, _)| label.len())
        .max()
        .unwrap_or(0);
    let room = width.map(|width| usize::from(width).saturating_sub(labels + 2).max(20));
    let mut text = String::new();
    for (label, value) in pairs {
        let lines = match room {
            Some(room) => wrapped(value, room),
            None => vec![value.clone()],
        };
        for (index, line) in lines.iter().enumerate() {
            let label = if index == 0 { *label } else { "" };
            text.push_str(format!("{label:<labels$}  {line}").trim_end());
            text.push('\n');
        }
    }
    text
}

/// `text` in lines of at most `room` columns, broken at spaces, but never
/// at the space after a number (`5.47 s`, `12 kernels`): a number stays
/// beside its unit. A piece longer than `room` stands alone.
fn wrapped(text: &str, room: usize) -> Vec<String> {
    // The pieces between break opportunities.
    let mut pieces: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match pieces.last_mut() {
            Some(last) if last.ends_with(|c: char| c.is_ascii_digit()) => {
                last.push(' ');
                last.push_str(word);
            }
            _ => pieces.push(word.to_owned()),
        }
    }
    let mut lines: Vec<String> = Vec::new();
    for piece in pieces {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + piece.chars().count() <= room => {
                line.push(' ');
                line.push_str(&piece);
            }
            _ => lines.push(piece),
        }
    }
    lines
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
            table.render_at(None),
            "NAME        SIZE\na            1 B\nlonger  10.0 KiB\n"
        );
    }

    #[test]
    fn a_long_cell_wraps_inside_the_width_and_numbers_stay_whole() {
        let mut table = Table::new(&["KIND", "SUBJECT", "SIZE>"]);
        let long = "saxpy N=4 BLOCK=128 TYPE=float ".repeat(6);
        table.row(vec!["kernel".into(), long.clone(), "1234567 B".into()]);
        let text = table.render_at(Some(40));
        for line in text.lines() {
            assert!(line.chars().count() <= 40, "{line:?} in\n{text}");
        }
        assert!(text.contains("1234567 B"), "{text}");
        let words: Vec<&str> = text
            .lines()
            .skip(1)
            .flat_map(str::split_whitespace)
            .collect();
        assert_eq!(
            words.iter().filter(|word| **word == "BLOCK=128").count(),
            6,
            "nothing is cut off: {text}"
        );
        let wide = table.render_at(None);
        assert_eq!(wide.lines().count(), 2, "one line each at full width");
    }

    #[test]
    fn at_80_columns_a_number_stays_beside_its_unit_and_optional_columns_go_first() {
        let mut table = Table::new(&[
            "BACKEND",
            "TARGET",
            "KERNELS>",
            "HITS>",
            "REKEYED>",
            "COMPILED>",
            "FAILED>",
            "?UNSTORED>",
            "WALL>",
            "WORK>",
            "?WORKERS>",
        ]);
        table.row(
            [
                "cuda",
                "compile-only: sm_90, nvrtc 13.0",
                "56",
                "0",
                "0",
                "56",
                "0",
                "0",
                "12.47 s",
                "25.03 s",
                "2",
            ]
            .map(String::from)
            .to_vec(),
        );
        let text = table.render_at(Some(80));
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?} in\n{text}");
        }
        assert!(text.contains("12.47 s") && text.contains("cuda"), "{text}");
        assert!(!text.contains("UNSTORED  "), "{text}");
        assert!(
            text.ends_with(
                "(left out to fit 80 columns: UNSTORED, WORK, WORKERS; --wide shows them)\n"
            ),
            "optional columns first, then from the right, named in their order: {text}"
        );
        assert!(
            text.lines()
                .next()
                .is_some_and(|header| header.contains("WALL"))
        );
        let narrow = table.render_at(Some(30));
        for line in narrow.lines().filter(|line| !line.starts_with('(')) {
            assert!(line.chars().count() <= 30, "{line:?} in\n{narrow}");
        }
        assert!(narrow.contains("columns: HITS, REKEYED,"), "{narrow}");
        assert_eq!(
            table.render_at(None).lines().count(),
            2,
            "no limit: one line a row"
        );
    }

    #[test]
    fn a_pair_s_value_wraps_under_itself_and_keeps_numbers_beside_their_units() {
        let pairs = [
            ("root", "/a/store".to_owned()),
            (
                "request path",
                "0 request-path compiles (0 ms), 0 fallback loads, 0 background batches \
                 (12 failed kernels), 3 compiling at the last record, 5.47 s saved"
                    .to_owned(),
            ),
        ];
        let text = pairs_at(&pairs, Some(60));
        for line in text.lines() {
            assert!(line.chars().count() <= 60, "{line:?} in\n{text}");
        }
        assert!(
            text.starts_with("root          /a/store\nrequest path  0 request-path"),
            "{text}"
        );
        assert!(text.contains("5.47 s"), "{text}");
        assert!(text.contains("(12 failed"), "{text}");
        assert!(
            text.lines()
                .skip(2)
                .all(|line| line.starts_with("              ")),
            "{text}"
        );
        assert_eq!(
            pairs_at(&pairs, None).lines().count(),
            2,
            "no limit: one line a pair"
        );
    }

    #[test]
    fn rows_sort_by_their_cells_and_numbers_by_value() {
        let mut table = Table::new(&["NAME"]);
        for name in ["b", "k N=16", "a", "k N=4", "k N=04"] {
            table.row(vec![name.into()]);
        }
        table.row_sorted_by(vec!["0".into()], vec!["z first".into()]);
        table.sort();
        assert_eq!(
            table.render_at(None),
            "NAME\nz first\na\nb\nk N=4\nk N=04\nk N=16\n"
        );
    }
}
