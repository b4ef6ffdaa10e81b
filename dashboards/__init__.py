"""The Streamlit dashboard (`traceinsight dashboard`; app.py is its script), shipped as traceinsight.dashboards."""
