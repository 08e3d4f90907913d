# One image for web, worker and beat (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=costapp.settings
WORKDIR /app

COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY . .
# Hashed, gzip-compressed static files in the image (whitenoise serves the .gz
# only for files collectstatic compressed): plotly.js is ~1.5 MB on the wire,
# not 4.9. tests/foundation/test_compose_commands.py runs this very line.
RUN COSTAPP_STATIC_COLLECTED=true python manage.py collectstatic --noinput -v 0 -i widgetbundle.js -i datasets
ENV COSTAPP_STATIC_COLLECTED=true
# numba's compiled Prometheus loops (costapp/sources/prometheus/compiled.py)
# are cached where the app user may write, on the volume web and worker
# share: compiled once, not by every new worker process.
ENV NUMBA_CACHE_DIR=/app/var/numba
RUN useradd --system --uid 1000 costapp && mkdir -p /app/var && chown costapp /app/var
USER costapp
EXPOSE 8000
CMD ["gunicorn", "costapp.wsgi:application", "--config", "costapp/gunicorn_conf.py"]
