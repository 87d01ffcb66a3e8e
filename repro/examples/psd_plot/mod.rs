//! Small plotting helper shared by the PSD examples: one PNG with panels side
//! by side, each with line curves and optional points. Text needs a TrueType
//! font at run time (Debian package `fonts-dejavu-core`); without one the
//! figure is drawn without text.

use plotters::prelude::*;

/// One curve: points, colour, line width.
pub struct Curve {
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
    /// Colour.
    pub colour: RGBColor,
    /// Draw as dots instead of a line.
    pub dots: bool,
}

/// One panel.
pub struct Panel {
    /// Caption.
    pub title: String,
    /// Curves.
    pub curves: Vec<Curve>,
    /// y range.
    pub y_range: (f64, f64),
    /// x range.
    pub x_range: (f64, f64),
}

const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Registers DejaVu Sans as "sans-serif"; false if no font file was found.
pub fn load_font() -> bool {
    for path in FONT_PATHS {
        if let Ok(bytes) = std::fs::read(path) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return true;
            }
        }
    }
    eprintln!("note: no DejaVuSans.ttf found (Debian: apt install fonts-dejavu-core); drawing without text");
    false
}

/// Draws `panels` side by side into a PNG at `path`.
pub fn draw_panels(path: &str, panels: &[Panel], panel_size: (u32, u32)) -> Result<(), Box<dyn std::error::Error>> {
    let with_text = load_font();
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = BitMapBackend::new(path, (panel_size.0 * panels.len() as u32, panel_size.1)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, panels.len()));
    for (area, panel) in areas.iter().zip(panels) {
        let mut builder = ChartBuilder::on(area);
        builder.margin(12);
        if with_text {
            builder.caption(&panel.title, ("sans-serif", 18)).x_label_area_size(28).y_label_area_size(44);
        }
        let mut chart = builder.build_cartesian_2d(panel.x_range.0..panel.x_range.1, panel.y_range.0..panel.y_range.1)?;
        if with_text {
            chart.configure_mesh().light_line_style(WHITE).draw()?;
        } else {
            chart.configure_mesh().disable_mesh().x_labels(0).y_labels(0).draw()?;
        }
        for c in &panel.curves {
            if c.dots {
                chart.draw_series(c.points.iter().map(|&(x, y)| Circle::new((x, y), 2, c.colour.filled())))?;
            } else {
                chart.draw_series(LineSeries::new(c.points.iter().copied(), c.colour.stroke_width(2)))?;
            }
        }
    }
    root.present()?;
    Ok(())
}
